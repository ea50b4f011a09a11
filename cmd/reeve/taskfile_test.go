package main

import (
	"errors"
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// A workflow-file mistake names the file's line, the field path and what
// is accepted, without the --help hint.
func TestWorkflowFileErrorsNameLineFieldAndAcceptedValues(t *testing.T) {
	cases := []struct {
		name, path, file, want string
	}{
		{"duration without unit", "wf.yaml", "name: trip\nsteps:\n  - name: a\n    type: t\n    timeout: 10\n",
			`-f wf.yaml:5: steps[0].timeout: want a duration with its unit, such as "10s", "1.5s", "250ms" or "2m", got 10`},
		{"unknown enum value", "wf.yaml", "name: trip\nsteps:\n  - name: a\n    type: t\n  - name: b\n    type: t\n    escalation: undo\n",
			`-f wf.yaml:7: steps[1].escalation: want one of fail, compensate or wait_then_retry, got "undo"`},
		{"unknown field", "wf.json", "{\"name\": \"trip\",\n \"steps\": [{\"name\": \"a\", \"type\": \"t\",\n   \"timeot\": \"1s\"}]}",
			`-f wf.json:3: steps[0].timeot: unknown field; did you mean "timeout"? (the fields of StepSpec: name, type, dependsOn, config, timeout, retryPolicy, compensation, escalation, escalationWait, heartbeatTimeout, scheduleToStartTimeout, reassignAfterDisconnect, waitFor, sleep, concurrency)`},
		{"number where a string goes", "wf.yaml", "name: 42\n", `-f wf.yaml:1: name: want a string (quote it: "42"), got 42`},
		{"nested policy", "wf.yaml", "name: trip\ndefaultRetryPolicy:\n  maxAttempts: three\n",
			`-f wf.yaml:3: defaultRetryPolicy.maxAttempts: want a whole number, got "three"`},
		{"list expected", "wf.yaml", "name: trip\nsteps:\n  - name: a\n    type: t\n    dependsOn: b\n",
			`-f wf.yaml:5: steps[0].dependsOn: want a list, got "b"`},
		{"JSON syntax", "wf.json", "{\"name\": \"trip\",\n \"steps\": [}\n", `-f wf.json:2: invalid character '}' looking for beginning of value`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseWorkflow(tc.path, []byte(tc.file))
			var u usageError
			var f *fileError
			if !errors.As(err, &u) || !errors.As(err, &f) || err.Error() != tc.want {
				t.Fatalf("got %v\nwant %s", err, tc.want)
			}
		})
	}
}

// Enum values may be short and in any case, durations in Go's form.
func TestWorkflowFileAcceptsShortEnumsAndGoDurations(t *testing.T) {
	file := `name: trip
steps:
  - name: a
    type: t
    timeout: 2m
    escalation: compensate
    escalationWait: 1h30m
    compensation: {type: undo, timeout: 250ms}
  - name: b
    type: t
    escalation: Wait-Then-Retry
  - name: c
    type: t
    escalation: ESCALATION_FAIL
    timeout: 1.5s
`
	w, err := parseWorkflow("wf.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := w.GetSteps()[0], w.GetSteps()[1], w.GetSteps()[2]
	if a.GetTimeout().AsDuration() != 2*time.Minute || a.GetEscalationWait().AsDuration() != 90*time.Minute ||
		a.GetCompensation().GetTimeout().AsDuration() != 250*time.Millisecond || c.GetTimeout().AsDuration() != 1500*time.Millisecond {
		t.Errorf("durations: %v %v %v %v", a.GetTimeout(), a.GetEscalationWait(), a.GetCompensation().GetTimeout(), c.GetTimeout())
	}
	want := []reevev1.Escalation{reevev1.Escalation_ESCALATION_COMPENSATE, reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY, reevev1.Escalation_ESCALATION_FAIL}
	for i, s := range []*reevev1.StepSpec{a, b, c} {
		if s.GetEscalation() != want[i] {
			t.Errorf("step %s: escalation %v, want %v", s.GetName(), s.GetEscalation(), want[i])
		}
	}
}
