package workflow_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

func sleepy() *reevev1.Workflow {
	return &reevev1.Workflow{Name: "remind", Steps: []*reevev1.StepSpec{
		{Name: "wait", Sleep: durationpb.New(10 * time.Minute)},
		{Name: "mail", Type: "mail.send", DependsOn: []string{"wait"}},
	}}
}

func TestValidateSleepAndTaskTimeout(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(w *reevev1.Workflow)
		want   string // "" means valid
	}{
		{"valid", func(w *reevev1.Workflow) {}, ""},
		{"longest sleep", func(w *reevev1.Workflow) { w.Steps[0].Sleep = durationpb.New(workflow.MaxSleep) }, ""},
		{"sleep too short", func(w *reevev1.Workflow) { w.Steps[0].Sleep = durationpb.New(500 * time.Millisecond) }, "workflow.steps[0].sleep: 500ms is outside [1s, 8784h0m0s]"},
		{"sleep too long", func(w *reevev1.Workflow) { w.Steps[0].Sleep = durationpb.New(workflow.MaxSleep + time.Second) }, "workflow.steps[0].sleep"},
		{"sleep invalid", func(w *reevev1.Workflow) { w.Steps[0].Sleep = &durationpb.Duration{Seconds: 1, Nanos: -1} }, "workflow.steps[0].sleep: invalid duration"},
		{"sleep with type", func(w *reevev1.Workflow) { w.Steps[0].Type = "x" }, "workflow.steps[0].type: a sleep step is run by no agent: it takes no type"},
		{"sleep with waitFor", func(w *reevev1.Workflow) { w.Steps[0].WaitFor = "external" }, "workflow.steps[0].waitFor"},
		{"sleep with timeout", func(w *reevev1.Workflow) { w.Steps[0].Timeout = durationpb.New(time.Minute) }, "workflow.steps[0].timeout: a sleep step"},
		{"sleep with retry policy", func(w *reevev1.Workflow) { w.Steps[0].RetryPolicy = &reevev1.RetryPolicy{} }, "workflow.steps[0].retryPolicy"},
		{"sleep with compensation", func(w *reevev1.Workflow) { w.Steps[0].Compensation = &reevev1.CompensationSpec{Type: "x"} }, "workflow.steps[0].compensation"},
		{"sleep with heartbeat", func(w *reevev1.Workflow) { w.Steps[0].HeartbeatTimeout = durationpb.New(time.Second) }, "workflow.steps[0].heartbeatTimeout"},
		{"sleep with config", func(w *reevev1.Workflow) { w.Steps[0].Config = structpb.NewNullValue() }, "workflow.steps[0].config"},
		{"sleep with schedule-to-start", func(w *reevev1.Workflow) { w.Steps[0].ScheduleToStartTimeout = durationpb.New(time.Second) }, "workflow.steps[0].scheduleToStartTimeout"},
		{"sleep with reassign", func(w *reevev1.Workflow) { w.Steps[0].ReassignAfterDisconnect = durationpb.New(time.Second) }, "workflow.steps[0].reassignAfterDisconnect"},
		{"agent step still needs a type", func(w *reevev1.Workflow) { w.Steps[1].Type = "" }, "workflow.steps[1].type: required"},
		{"task timeout", func(w *reevev1.Workflow) { w.TaskTimeout = durationpb.New(time.Hour) }, ""},
		{"task timeout too short", func(w *reevev1.Workflow) { w.TaskTimeout = durationpb.New(time.Millisecond) }, "workflow.taskTimeout: 1ms is outside [1s, 8784h0m0s]"},
		{"task timeout too long", func(w *reevev1.Workflow) { w.TaskTimeout = durationpb.New(workflow.MaxTaskTimeout + time.Hour) }, "workflow.taskTimeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := sleepy()
			c.mutate(w)
			err := workflow.ValidateWorkflow("workflow", w, true)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("want an error containing %q, got %v", c.want, err)
			}
		})
	}
}

func TestValidateSubmitTimers(t *testing.T) {
	req := func() *reevev1.SubmitTaskRequest {
		return &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: sleepy()}}
	}
	r := req()
	r.TaskTimeout = durationpb.New(0)
	if err := workflow.ValidateSubmit(r); err == nil || !strings.HasPrefix(err.Error(), "task_timeout: ") {
		t.Fatalf("zero task_timeout: %v", err)
	}
	r = req()
	r.TaskTimeout = durationpb.New(time.Hour)
	if err := workflow.ValidateSubmit(r); err != nil {
		t.Fatal(err)
	}
	if got := workflow.TaskTimeout(&reevev1.Workflow{TaskTimeout: durationpb.New(time.Minute)}, r); got != time.Hour {
		t.Fatalf("the submission's task timeout wins: %v", got)
	}
	if got := workflow.TaskTimeout(&reevev1.Workflow{TaskTimeout: durationpb.New(time.Minute)}, req()); got != time.Minute {
		t.Fatalf("the workflow's task timeout: %v", got)
	}

	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		ts   *timestamppb.Timestamp
		want time.Time
		err  string
	}{
		{"none", nil, time.Time{}, ""},
		{"past is now", timestamppb.New(now.Add(-time.Hour)), time.Time{}, ""},
		{"now", timestamppb.New(now), time.Time{}, ""},
		{"later", timestamppb.New(now.Add(10 * time.Minute)), now.Add(10 * time.Minute), ""},
		{"a year", timestamppb.New(now.Add(workflow.MaxStartDelay)), now.Add(workflow.MaxStartDelay), ""},
		{"too far", timestamppb.New(now.Add(workflow.MaxStartDelay + time.Second)), time.Time{}, "start_time: 2027-01-02T00:00:01Z is more than"},
		{"invalid", &timestamppb.Timestamp{Seconds: -1 << 62}, time.Time{}, "start_time: invalid timestamp"},
	} {
		got, err := workflow.ValidateStartTime("start_time", c.ts, now)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: want %q, got %v", c.name, c.err, err)
		case !got.Equal(c.want):
			t.Errorf("%s: start %v, want %v", c.name, got, c.want)
		}
	}
}
