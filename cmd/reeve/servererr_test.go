package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reeve-org/reeve/internal/testenv"
)

// A workflow file the scheduler refuses reads like the CLI's own checks of
// the file: its line, the field as the file spells it, a suggestion, exit
// 2 — for workflow register and task submit -f, and for a file that spells
// the field by its proto name.
func TestServerRefusalOfAFileNamesItsLine(t *testing.T) {
	addr := testenv.New(t).StartScheduler("").Addr
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	camel := write("onboard.yaml", `name: onboard
steps:
  - name: create_account
    type: onboard.create_account
  - name: create_billing
    type: onboard.create_billing_customer
    dependsOn: [create_account]
  - name: send_welcome
    type: onboard.send_welcome
    dependsOn:
      - create_biling
`)
	snake := write("snake.json", `{"name": "onboard",
 "steps": [
  {"name": "create_account", "type": "onboard.create_account"},
  {"name": "create_billing", "type": "onboard.create_billing_customer", "depends_on": ["create_accont"]}
 ]}
`)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"workflow", "register", "-f", camel}, "-f " + camel + `:11: steps[2].dependsOn[0]: unknown step "create_biling"; did you mean "create_billing"?`},
		{[]string{"task", "submit", "-f", camel}, "-f " + camel + `:11: steps[2].dependsOn[0]: unknown step "create_biling"; did you mean "create_billing"?`},
		{[]string{"workflow", "register", "-f", snake}, "-f " + snake + `:4: steps[1].dependsOn[0]: unknown step "create_accont"; did you mean "create_account"?`},
	} {
		code, _, errOut := reeve(t, addr, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "--help") {
			t.Errorf("reeve %s: exit %d, stderr %q; want exit %d with %q", strings.Join(tc.args[:2], " "), code, errOut, exitUsage, tc.want)
		}
	}
}
