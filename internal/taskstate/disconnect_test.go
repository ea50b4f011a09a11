package taskstate_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// ExpireDisconnected over every state the named execution can be in when
// the scheduler's heartbeat timer fires: it acts only on the attempt the
// dropped agent still holds, not re-adopted since its last beat, once the
// heartbeat deadline passed; everything else is refused without a change.
func TestExpireDisconnected(t *testing.T) {
	const hb = 5 * time.Second
	lastBeat := t0.Add(10 * time.Second)
	deadline := lastBeat.Add(hb)
	at := deadline.Add(10 * time.Millisecond)
	// held: reserve dispatched to agent "a" at t0 (complete-by a minute away).
	held := func() (*reevev1.Task, int32) {
		wf := orders()
		wf.Steps[0].Timeout = durationpb.New(time.Minute)
		wf.Steps[0].HeartbeatTimeout = durationpb.New(hb)
		task := taskstate.New("default", "t", wf, nil, t0)
		return task, run(t, task, "reserve", t0).GetAttempt()
	}
	cases := []struct {
		name    string
		setup   func() (*reevev1.Task, int32)
		agent   string
		now     time.Time
		want    error // nil: expired, and the decision applies
		action  taskstate.Action
		applies bool
	}{
		{name: "held by the agent, deadline passed", setup: held, agent: "a", now: at, action: taskstate.ActionRetry},
		{name: "held, exactly at the deadline", setup: held, agent: "a", now: deadline, action: taskstate.ActionRetry},
		{name: "held, deadline not passed", setup: held, agent: "a", now: deadline.Add(-time.Millisecond), want: taskstate.ErrNotExpired},
		{name: "another agent holds it", setup: held, agent: "b", now: at, want: taskstate.ErrStale},
		{name: "stale attempt", agent: "a", now: at, want: taskstate.ErrStale, setup: func() (*reevev1.Task, int32) {
			task, attempt := held()
			if err := taskstate.RetryExpired(task, "reserve", attempt, 0, "supervisor/s", t0.Add(2*time.Minute)); err != nil {
				t.Fatal(err)
			}
			run(t, task, "reserve", t0.Add(2*time.Minute)) // attempt 2, same agent
			return task, attempt
		}},
		{name: "queued again (not dispatched)", agent: "a", now: at, want: taskstate.ErrStale, setup: func() (*reevev1.Task, int32) {
			task, attempt := held()
			if err := taskstate.RetryExpired(task, "reserve", attempt, 0, "supervisor/s", t0.Add(2*time.Minute)); err != nil {
				t.Fatal(err)
			}
			return task, attempt + 1
		}},
		{name: "step succeeded", agent: "a", now: at, want: taskstate.ErrStale, setup: func() (*reevev1.Task, int32) {
			task, attempt := held()
			if err := taskstate.Complete(task, &reevev1.StepRef{Namespace: "default", TaskId: "t", Step: "reserve", Attempt: attempt}, "a", nil, lastBeat); err != nil {
				t.Fatal(err)
			}
			return task, attempt
		}},
		{name: "task terminal", agent: "a", now: at, want: taskstate.ErrStale, setup: func() (*reevev1.Task, int32) {
			task, attempt := held()
			if err := taskstate.FailTask(task, "", "operator", lastBeat); err != nil {
				t.Fatal(err)
			}
			return task, attempt
		}},
		{name: "re-adopted after the last beat", agent: "a", now: at, want: taskstate.ErrStale, setup: func() (*reevev1.Task, int32) {
			task, attempt := held()
			if err := taskstate.RestoreOnReconnect(task, "reserve", attempt, "a", "scheduler/b", lastBeat.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
			return task, attempt
		}},
		{name: "adopted before the last beat (then dropped again)", agent: "a", now: at, action: taskstate.ActionRetry, setup: func() (*reevev1.Task, int32) {
			task, attempt := held()
			if err := taskstate.RestoreOnReconnect(task, "reserve", attempt, "a", "scheduler/a", lastBeat.Add(-time.Second)); err != nil {
				t.Fatal(err)
			}
			return task, attempt
		}},
		{name: "last attempt: the escalation applies", agent: "a", now: at, action: taskstate.ActionFail, setup: func() (*reevev1.Task, int32) {
			task, attempt := held()
			taskstate.FindStep(task, "reserve").FailureCount = 1 // orders allows 2 attempts
			return task, attempt
		}},
		{name: "a dispatched compensation", agent: "a", now: at, action: taskstate.ActionRetry, setup: func() (*reevev1.Task, int32) {
			task, attempt := held()
			if err := taskstate.Complete(task, &reevev1.StepRef{Namespace: "default", TaskId: "t", Step: "reserve", Attempt: attempt}, "a", nil, t0); err != nil {
				t.Fatal(err)
			}
			if err := taskstate.Compensate(task, "", "operator", t0); err != nil {
				t.Fatal(err)
			}
			s := taskstate.FindStep(task, "reserve")
			if !taskstate.Compensating(s) || !taskstate.Queued(s) {
				t.Fatalf("compensation not queued: %v", s)
			}
			return task, run(t, task, "reserve", t0).GetAttempt()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task, attempt := tc.setup()
			before := proto.Clone(task).(*reevev1.Task)
			action, _, err := taskstate.ExpireDisconnected(task, "reserve", attempt, tc.agent, lastBeat, deadline, "scheduler/a", tc.now)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
				if !proto.Equal(before, task) {
					t.Fatal("a refusal changed the task")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if action != tc.action {
				t.Fatalf("action %v, want %v", action, tc.action)
			}
			s := taskstate.FindStep(task, "reserve")
			if !s.GetCompleteBy().AsTime().Equal(deadline) {
				t.Fatalf("complete-by %v, want the heartbeat deadline %v", s.GetCompleteBy().AsTime(), deadline)
			}
			h := task.GetHistory()[len(task.GetHistory())-1]
			if h.GetKind() != "step.agent_disconnected" || h.GetActor() != "scheduler/a" || h.GetAttempt() != attempt {
				t.Fatalf("last history %v, want step.agent_disconnected by scheduler/a", h)
			}
			// The decision applies in the same write.
			switch action {
			case taskstate.ActionRetry:
				err = taskstate.RetryExpired(task, "reserve", attempt, 0, "scheduler/a", tc.now)
			case taskstate.ActionCompensate:
				err = taskstate.CompensateExpired(task, "reserve", attempt, "", "scheduler/a", tc.now)
			default:
				err = taskstate.FailExpired(task, "reserve", attempt, "", "scheduler/a", tc.now)
			}
			if err != nil {
				t.Fatalf("applying %v: %v", action, err)
			}
		})
	}
	t.Run("unknown step", func(t *testing.T) {
		task, attempt := held()
		if _, _, err := taskstate.ExpireDisconnected(task, "nope", attempt, "a", lastBeat, deadline, "scheduler/a", at); !errors.Is(err, taskstate.ErrUnknownStep) {
			t.Fatalf("err = %v, want ErrUnknownStep", err)
		}
	})
}

// A reconnect always leaves an event, also when the complete-by was never
// shortened (the old scheduler only kept the beat in memory), and keeps
// the complete-by in force.
func TestRestoreOnReconnectAlwaysRecords(t *testing.T) {
	wf := orders()
	wf.Steps[0].Timeout = durationpb.New(time.Minute)
	wf.Steps[0].HeartbeatTimeout = durationpb.New(time.Second)
	task := taskstate.New("default", "t", wf, nil, t0)
	attempt := run(t, task, "reserve", t0).GetAttempt()
	by := taskstate.FindStep(task, "reserve").GetCompleteBy().AsTime()
	if err := taskstate.RestoreOnReconnect(task, "reserve", attempt, "a", "scheduler/b", t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if h := task.GetHistory()[len(task.GetHistory())-1]; h.GetKind() != "step.agent_reconnected" {
		t.Fatalf("last history %v, want step.agent_reconnected", h)
	}
	if got := taskstate.FindStep(task, "reserve").GetCompleteBy().AsTime(); !got.Equal(by) {
		t.Fatalf("complete-by %v, want %v", got, by)
	}
}
