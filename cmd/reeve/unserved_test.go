package main

import (
	"bytes"
	"testing"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// workflow register's warnings: a typo of a served type on a line of its
// own, naming the served type; the other unserved types on one line; none
// for served types.
func TestWarnUnservedNamesTyposAndGroupsTheRest(t *testing.T) {
	agents := &namespaceAgents{served: map[string]bool{"onboard.create_account": true, "onboard.create_billing_customr": true},
		types: []string{"onboard.create_account", "onboard.create_billing_customr"}}
	wf := &reevev1.Workflow{Steps: []*reevev1.StepSpec{
		{Name: "create_account", Type: "onboard.create_account", Compensation: &reevev1.CompensationSpec{Type: "onboard.delete_account"}},
		{Name: "create_billing", Type: "onboard.create_billing_customer"},
		{Name: "send_welcome", Type: "mail.send_welcome"},
		{Name: "send_again", Type: "mail.send_welcome"},
	}}
	var b bytes.Buffer
	warnUnserved(&b, wf, agents)
	want := `reeve: warning: step "create_billing": no agent serves onboard.create_billing_customer; agents serve onboard.create_billing_customr
reeve: warning: no agent serves onboard.delete_account, mail.send_welcome now: their steps wait for one
`
	if b.String() != want {
		t.Fatalf("warnings:\n%s\nwant:\n%s", b.String(), want)
	}
}
