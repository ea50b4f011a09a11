package client_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/client"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// The outputs of a task's steps decode into the caller's struct, keyed by
// step name; the input the client sent is what the steps read.
func TestSubmitGetDecodesStepOutputs(t *testing.T) {
	e := newEnv(t, map[string]agentsdk.HandlerFunc{
		"greet": func(_ context.Context, s *agentsdk.Step) (any, error) {
			var in struct{ Name string }
			if err := s.Input(&in); err != nil {
				return nil, agentsdk.Permanent(err)
			}
			return map[string]any{"greeting": "hello " + in.Name}, nil
		},
		"count": func(_ context.Context, s *agentsdk.Step) (any, error) {
			var prev struct{ Greeting string }
			if err := s.DependencyOutput("greet", &prev); err != nil {
				return nil, agentsdk.Permanent(err)
			}
			return map[string]any{"letters": len(prev.Greeting)}, nil
		},
	})
	e.register(t, &reevev1.Workflow{Name: "hello", Steps: []*reevev1.StepSpec{step("greet", "greet"), step("count", "count", "greet")}})

	run, err := e.c.Submit(ctx(t), "hello", struct{ Name string }{"ada"})
	if err != nil {
		t.Fatal(err)
	}
	if run.ID() == "" || !run.Created() {
		t.Fatalf("run id %q, created %v; want a generated id of a new task", run.ID(), run.Created())
	}
	var out struct {
		Greet struct{ Greeting string } `json:"greet"`
		Count struct{ Letters int }     `json:"count"`
	}
	if err := run.Get(ctx(t), &out); err != nil {
		t.Fatal(err)
	}
	if out.Greet.Greeting != "hello ada" || out.Count.Letters != 9 {
		t.Fatalf("outputs %+v; want greeting %q and 9 letters", out, "hello ada")
	}
	task, err := run.Wait(ctx(t))
	if err != nil || task.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("Wait: %v, %v; want SUCCEEDED", task.GetState(), err)
	}
	var count struct{ Letters int }
	if err := client.StepOutput(task, "count", &count); err != nil || count.Letters != 9 {
		t.Fatalf("StepOutput: %+v, %v", count, err)
	}
}

// The same task id submitted twice is one task; with another input it is
// refused with ALREADY_EXISTS.
func TestSubmitWithTaskIDIsIdempotent(t *testing.T) {
	runs := 0
	e := newEnv(t, map[string]agentsdk.HandlerFunc{
		"once": func(context.Context, *agentsdk.Step) (any, error) { runs++; return map[string]int{"run": runs}, nil },
	})
	e.register(t, &reevev1.Workflow{Name: "once", Steps: []*reevev1.StepSpec{step("once", "once")}})

	first, err := e.c.Submit(ctx(t), "once", map[string]int{"n": 1}, client.WithTaskID("order-7"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Wait(ctx(t)); err != nil {
		t.Fatal(err)
	}
	again, err := e.c.Submit(ctx(t), "once", map[string]int{"n": 1}, client.WithTaskID("order-7"))
	if err != nil {
		t.Fatal(err)
	}
	if again.ID() != "order-7" || !first.Created() || again.Created() {
		t.Fatalf("second submit: id %q created %v (first created %v); want the existing task order-7", again.ID(), again.Created(), first.Created())
	}
	var out struct{ Once struct{ Run int } }
	if err := again.Get(ctx(t), &out); err != nil || out.Once.Run != 1 {
		t.Fatalf("second submit's output %+v, %v; want the first run's (run 1)", out, err)
	}
	_, err = e.c.Submit(ctx(t), "once", map[string]int{"n": 2}, client.WithTaskID("order-7"))
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("same id, other input: %v; want ALREADY_EXISTS", err)
	}
}

// A canceled task's Wait returns it with a *TaskError in state CANCELED.
func TestCancelEndsWaitWithTaskError(t *testing.T) {
	started := make(chan struct{}, 1)
	e := newEnv(t, map[string]agentsdk.HandlerFunc{
		"block": func(ctx context.Context, _ *agentsdk.Step) (any, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		},
	})
	e.register(t, &reevev1.Workflow{Name: "block", Steps: []*reevev1.StepSpec{step("block", "block")}})
	run, err := e.c.Submit(ctx(t), "block", nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-ctx(t).Done():
		t.Fatal("the step never started")
	}
	if _, err := run.Cancel(ctx(t), "changed my mind"); err != nil {
		t.Fatal(err)
	}
	task, err := run.Wait(ctx(t))
	var te *client.TaskError
	if !errors.As(err, &te) || te.State != reevev1.TaskState_TASK_STATE_CANCELED || task.GetState() != te.State || te.Task.GetId() != run.ID() {
		t.Fatalf("Wait after cancel: %v, %v; want a *TaskError CANCELED", task.GetState(), err)
	}
	if te.Step != "" || te.Reason == "" {
		t.Fatalf("TaskError %+v; want the cancel's reason and no failed step", te)
	}
	if !client.IsTerminal(task.GetState()) {
		t.Fatalf("IsTerminal(%v) = false", task.GetState())
	}
}

// A step that fails for good ends its task COMPENSATED (escalation
// COMPENSATE: the succeeded steps undone) or FAILED (escalation FAIL); Wait
// and Get return a *TaskError naming the step and its error.
func TestFailedTaskError(t *testing.T) {
	undone := make(chan string, 4)
	e := newEnv(t, map[string]agentsdk.HandlerFunc{
		"book": func(context.Context, *agentsdk.Step) (any, error) { return map[string]string{"booking": "B-1"}, nil },
		"unbook": func(_ context.Context, s *agentsdk.Step) (any, error) {
			undone <- s.TaskID
			return nil, nil
		},
		"charge": func(context.Context, *agentsdk.Step) (any, error) {
			return nil, &agentsdk.Error{Code: "card_declined", Message: "insufficient funds", NonRetryable: true}
		},
	})
	for _, c := range []struct {
		escalation reevev1.Escalation
		want       reevev1.TaskState
	}{
		{reevev1.Escalation_ESCALATION_COMPENSATE, reevev1.TaskState_TASK_STATE_COMPENSATED},
		{reevev1.Escalation_ESCALATION_FAIL, reevev1.TaskState_TASK_STATE_FAILED},
	} {
		t.Run(c.want.String(), func(t *testing.T) {
			name := "pay-" + c.escalation.String()[len("ESCALATION_"):]
			book := step("book", "book")
			book.Compensation = &reevev1.CompensationSpec{Type: "unbook"}
			charge := step("charge", "charge", "book")
			charge.Escalation = c.escalation
			e.register(t, &reevev1.Workflow{Name: name, Steps: []*reevev1.StepSpec{book, charge}})

			run, err := e.c.Submit(ctx(t), name, nil)
			if err != nil {
				t.Fatal(err)
			}
			var out map[string]any
			err = run.Get(ctx(t), &out)
			var te *client.TaskError
			if !errors.As(err, &te) || te.State != c.want {
				t.Fatalf("Get: %v; want a *TaskError in %v", err, c.want)
			}
			if te.Step != "charge" || te.StepError.GetCode() != "card_declined" || out != nil {
				t.Fatalf("TaskError step %q error %v, out %v; want charge's card_declined and out untouched", te.Step, te.StepError, out)
			}
			if c.want == reevev1.TaskState_TASK_STATE_COMPENSATED {
				if got := <-undone; got != run.ID() {
					t.Fatalf("compensated %s; want %s", got, run.ID())
				}
			}
		})
	}
}

// An operator's actions through a Run: Compensate a FAILED task, Fail a
// running one, RetryStep a FAILED step that then succeeds.
func TestOperatorActions(t *testing.T) {
	declines := make(chan bool, 1)
	declines <- true
	started := make(chan struct{}, 1)
	e := newEnv(t, map[string]agentsdk.HandlerFunc{
		"book":   func(context.Context, *agentsdk.Step) (any, error) { return map[string]string{"booking": "B-1"}, nil },
		"unbook": func(context.Context, *agentsdk.Step) (any, error) { return nil, nil },
		"charge": func(context.Context, *agentsdk.Step) (any, error) {
			select {
			case <-declines:
				return nil, &agentsdk.Error{Code: "card_declined", NonRetryable: true}
			default:
				return map[string]bool{"charged": true}, nil
			}
		},
		"block": func(ctx context.Context, _ *agentsdk.Step) (any, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		},
	})
	book := step("book", "book")
	book.Compensation = &reevev1.CompensationSpec{Type: "unbook"}
	charge := step("charge", "charge", "book")
	charge.Escalation = reevev1.Escalation_ESCALATION_FAIL
	e.register(t, &reevev1.Workflow{Name: "pay", Steps: []*reevev1.StepSpec{book, charge}})
	e.register(t, &reevev1.Workflow{Name: "block", Steps: []*reevev1.StepSpec{step("block", "block")}})

	failed := func(t *testing.T) *client.Run {
		t.Helper()
		run, err := e.c.Submit(ctx(t), "pay", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Wait(ctx(t)); err == nil {
			t.Fatal("the task succeeded; want FAILED")
		}
		return run
	}
	t.Run("retry", func(t *testing.T) {
		run := failed(t)
		if _, err := run.RetryStep(ctx(t), "charge", "card replaced"); err != nil {
			t.Fatal(err)
		}
		var out struct{ Charge struct{ Charged bool } }
		if err := run.Get(ctx(t), &out); err != nil || !out.Charge.Charged {
			t.Fatalf("after retry: %+v, %v; want charged", out, err)
		}
	})
	t.Run("compensate", func(t *testing.T) {
		declines <- true
		run := failed(t)
		if _, err := run.Compensate(ctx(t), "give up"); err != nil {
			t.Fatal(err)
		}
		_, err := run.Wait(ctx(t))
		var te *client.TaskError
		if !errors.As(err, &te) || te.State != reevev1.TaskState_TASK_STATE_COMPENSATED {
			t.Fatalf("after compensate: %v; want COMPENSATED", err)
		}
	})
	t.Run("fail", func(t *testing.T) {
		run, err := e.c.Submit(ctx(t), "block", nil)
		if err != nil {
			t.Fatal(err)
		}
		<-started
		if _, err := run.Fail(ctx(t), "stuck"); err != nil {
			t.Fatal(err)
		}
		_, err = run.Wait(ctx(t))
		var te *client.TaskError
		if !errors.As(err, &te) || te.State != reevev1.TaskState_TASK_STATE_FAILED {
			t.Fatalf("after fail: %v; want FAILED", err)
		}
	})
}
