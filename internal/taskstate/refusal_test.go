package taskstate_test

import (
	"errors"
	"strings"
	"testing"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// A refused result says what happened, with no package name in it.
func TestResultRefusalsSayWhatHappened(t *testing.T) {
	cases := []struct {
		name   string
		step   string
		agent  string
		offset int32 // from reserve's current attempt
		setup  func(t *testing.T, task *reevev1.Task)
		want   string
		is     error
	}{
		{"wrong agent", "reserve", "a-1", 0, func(t *testing.T, task *reevev1.Task) { claimBy(t, task, "reserve", "a-2") },
			`attempt 1 of step "reserve" is held by agent a-2, not a-1`, taskstate.ErrStale},
		{"never dispatched", "reserve", "a-1", 0, func(*testing.T, *reevev1.Task) {},
			`attempt 1 of step "reserve" was never dispatched: it is PENDING, queued for an agent`, taskstate.ErrStale},
		{"duplicate", "reserve", "a-1", 0, func(t *testing.T, task *reevev1.Task) {
			ref := claimBy(t, task, "reserve", "a-1")
			if err := taskstate.Complete(task, ref, "a-1", nil, t0); err != nil {
				t.Fatal(err)
			}
		}, `attempt 1 of step "reserve" already SUCCEEDED: a result for it was accepted before`, taskstate.ErrStale},
		{"superseded", "reserve", "a-1", -1, func(t *testing.T, task *reevev1.Task) {
			ref := claimBy(t, task, "reserve", "a-1")
			if err := taskstate.Fail(task, ref, "a-1", &reevev1.StepError{Message: "flaky"}, t0); err != nil {
				t.Fatal(err)
			}
		}, `attempt 1 of step "reserve" was superseded: the step is at attempt 2 (PENDING)`, taskstate.ErrStale},
		{"unknown step", "x", "a-1", 0, func(*testing.T, *reevev1.Task) {}, `task t-1 has no step "x"`, taskstate.ErrUnknownStep},
		{"canceled", "reserve", "a-1", 0, func(t *testing.T, task *reevev1.Task) {
			claimBy(t, task, "reserve", "a-1")
			if err := taskstate.Cancel(task, "", "client", false, t0); err != nil {
				t.Fatal(err)
			}
		}, `attempt 1 of step "reserve" is CANCELED and task t-1 is CANCELED: the result came too late`, taskstate.ErrStale},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task := taskstate.New("default", "t-1", orders(), nil, t0)
			tc.setup(t, task)
			ref := &reevev1.StepRef{Namespace: "default", TaskId: "t-1", Step: tc.step, Attempt: taskstate.FindStep(task, "reserve").GetAttempt() + tc.offset}
			err := taskstate.Complete(task, ref, tc.agent, nil, t0)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.is) || strings.Contains(err.Error(), "taskstate") {
				t.Fatalf("got %v, want %q matching %v", err, tc.want, tc.is)
			}
		})
	}
}

func claimBy(t *testing.T, task *reevev1.Task, name, agent string) *reevev1.StepRef {
	t.Helper()
	s := taskstate.FindStep(task, name)
	if err := taskstate.Claim(task, name, s.GetAttempt(), "s1", agent, t0); err != nil {
		t.Fatal(err)
	}
	return taskstate.Ref(task, s)
}
