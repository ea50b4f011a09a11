package main

import (
	"testing"
	"time"
)

// A workflow file spells a sleep step `sleep` and the task's deadline
// `taskTimeout`, with Go durations.
func TestWorkflowFileSleepAndTaskTimeout(t *testing.T) {
	file := `name: remind
taskTimeout: 2h
steps:
  - name: wait
    sleep: 10m
  - name: mail
    type: mail.send
    dependsOn: [wait]
`
	w, err := parseWorkflow("wf.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.GetTaskTimeout().AsDuration(); got != 2*time.Hour {
		t.Errorf("taskTimeout %v", got)
	}
	if got := w.GetSteps()[0].GetSleep().AsDuration(); got != 10*time.Minute {
		t.Errorf("sleep %v", got)
	}
}
