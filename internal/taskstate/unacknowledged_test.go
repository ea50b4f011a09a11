package taskstate_test

import (
	"errors"
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// An attempt its agent never acknowledged goes back to the queue at once
// and does not count against the retry limit (orders allows 2 attempts).
func TestUnacknowledgedRequeuesWithoutFailure(t *testing.T) {
	task := taskstate.New("default", "t", orders(), nil, t0)
	for i := range 5 {
		ref := run(t, task, "reserve", t0)
		if err := taskstate.Unacknowledged(task, "reserve", ref.GetAttempt(), "a", "not acknowledged", "scheduler/s1", t0); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		s := taskstate.FindStep(task, "reserve")
		if !taskstate.Queued(s) || s.GetFailureCount() != 0 || s.GetAttempt() != ref.GetAttempt()+1 || s.GetLockedByAgent() != "" {
			t.Fatalf("round %d: step %v", i, s)
		}
	}
	if task.GetState() == reevev1.TaskState_TASK_STATE_FAILED {
		t.Fatal("task failed")
	}
}

// A claim that never committed, another agent's attempt or a later attempt
// are left alone.
func TestUnacknowledgedRefusesOtherExecutions(t *testing.T) {
	task := taskstate.New("default", "t", orders(), nil, t0)
	queued := taskstate.FindStep(task, "reserve").GetAttempt()
	if err := taskstate.Unacknowledged(task, "reserve", queued, "a", "", "s", t0); !errors.Is(err, taskstate.ErrStale) {
		t.Fatalf("queued step: %v, want ErrStale", err)
	}
	ref := run(t, task, "reserve", t0)
	if err := taskstate.Unacknowledged(task, "reserve", ref.GetAttempt(), "b", "", "s", t0); !errors.Is(err, taskstate.ErrStale) {
		t.Fatalf("other agent: %v, want ErrStale", err)
	}
	if err := taskstate.Unacknowledged(task, "reserve", ref.GetAttempt()-1, "a", "", "s", t0); !errors.Is(err, taskstate.ErrStale) {
		t.Fatalf("old attempt: %v, want ErrStale", err)
	}
	if s := taskstate.FindStep(task, "reserve"); !taskstate.Dispatched(s) {
		t.Fatalf("step changed: %v", s)
	}
}

// Past MaxUnacknowledged, unacknowledged attempts count as failures: a step
// no agent ever takes ends by its policy.
func TestUnacknowledgedIsBounded(t *testing.T) {
	task := taskstate.New("default", "t", orders(), nil, t0)
	now := t0
	for range taskstate.MaxUnacknowledged + 2 {
		s := taskstate.FindStep(task, "reserve")
		if !taskstate.Queued(s) {
			break
		}
		now = now.Add(time.Minute) // past any backoff
		ref := run(t, task, "reserve", now)
		if err := taskstate.Unacknowledged(task, "reserve", ref.GetAttempt(), "a", "not acknowledged", "s", now); err != nil {
			t.Fatal(err)
		}
	}
	s := taskstate.FindStep(task, "reserve")
	if s.GetUnacknowledgedAttempts() != taskstate.MaxUnacknowledged || s.GetFailureCount() != 2 || s.GetLastError().GetCode() != taskstate.CodeNotAcknowledged {
		t.Fatalf("step %v", s)
	}
	if task.GetState() != reevev1.TaskState_TASK_STATE_FAILED {
		t.Fatalf("task %s, want FAILED after the policy's attempts", task.GetState())
	}
}
