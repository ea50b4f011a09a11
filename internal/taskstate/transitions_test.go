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

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// orders is reserve -> charge -> ship, reserve and charge with a
// compensation. reserve and charge fail the task for an operator
// (ESCALATION_FAIL, said explicitly: a saga's default is to compensate),
// ship escalates by compensation.
func orders() *reevev1.Workflow {
	comp := func(typ string) *reevev1.CompensationSpec { return &reevev1.CompensationSpec{Type: typ} }
	retry := &reevev1.RetryPolicy{MaxAttempts: 2, InitialBackoff: durationpb.New(time.Second)}
	return &reevev1.Workflow{Name: "orders", DefaultRetryPolicy: retry, Steps: []*reevev1.StepSpec{
		{Name: "reserve", Type: "inv.reserve", Compensation: comp("inv.release"), Escalation: reevev1.Escalation_ESCALATION_FAIL},
		{Name: "charge", Type: "pay.charge", DependsOn: []string{"reserve"}, Compensation: comp("pay.refund"), Escalation: reevev1.Escalation_ESCALATION_FAIL},
		{Name: "ship", Type: "ship.ship", DependsOn: []string{"charge"}, Escalation: reevev1.Escalation_ESCALATION_COMPENSATE},
	}}
}

// run claims the step's queued attempt for agent "a" and returns its ref.
func run(t *testing.T, task *reevev1.Task, name string, at time.Time) *reevev1.StepRef {
	t.Helper()
	s := taskstate.FindStep(task, name)
	if err := taskstate.Claim(task, name, s.GetAttempt(), "s1", "a", at); err != nil {
		t.Fatalf("claim %s: %v", name, err)
	}
	return taskstate.Ref(task, s)
}

func states(task *reevev1.Task) map[string]reevev1.StepState {
	out := map[string]reevev1.StepState{}
	for _, s := range task.GetSteps() {
		out[s.GetName()] = s.GetState()
	}
	return out
}

func TestNewQueuesOnlyRoots(t *testing.T) {
	task := taskstate.New("default", "t", orders(), nil, t0)
	for _, s := range task.GetSteps() {
		queued := taskstate.Queued(s)
		if queued != (s.GetName() == "reserve") {
			t.Errorf("step %s queued=%v", s.GetName(), queued)
		}
	}
	if task.GetState() != reevev1.TaskState_TASK_STATE_PENDING {
		t.Fatalf("state %v", task.GetState())
	}
}

func TestHappyPathSucceeds(t *testing.T) {
	task := taskstate.New("default", "t", orders(), nil, t0)
	for _, name := range []string{"reserve", "charge", "ship"} {
		ref := run(t, task, name, t0)
		if task.GetState() != reevev1.TaskState_TASK_STATE_RUNNING {
			t.Fatalf("after claim: task %v", task.GetState())
		}
		if err := taskstate.Complete(task, ref, "a", nil, t0); err != nil {
			t.Fatal(err)
		}
	}
	if task.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || task.GetEndTime() == nil {
		t.Fatalf("task %v end %v, want SUCCEEDED with an end time", task.GetState(), task.GetEndTime())
	}
}

func TestRefusals(t *testing.T) {
	cases := []struct {
		name string
		do   func(task *reevev1.Task, ref *reevev1.StepRef) error
		want error
	}{
		{"other attempt", func(task *reevev1.Task, ref *reevev1.StepRef) error {
			return taskstate.Complete(task, &reevev1.StepRef{Step: ref.Step, Attempt: ref.Attempt + 1}, "a", nil, t0)
		}, taskstate.ErrStale},
		{"other agent", func(task *reevev1.Task, ref *reevev1.StepRef) error {
			return taskstate.Complete(task, ref, "intruder", nil, t0)
		}, taskstate.ErrStale},
		{"unknown step", func(task *reevev1.Task, ref *reevev1.StepRef) error {
			return taskstate.Fail(task, &reevev1.StepRef{Step: "ghost", Attempt: 1}, "a", &reevev1.StepError{}, t0)
		}, taskstate.ErrUnknownStep},
		{"step not running", func(task *reevev1.Task, ref *reevev1.StepRef) error {
			return taskstate.Complete(task, &reevev1.StepRef{Step: "charge", Attempt: 0}, "a", nil, t0)
		}, taskstate.ErrStale},
		{"claim twice", func(task *reevev1.Task, ref *reevev1.StepRef) error {
			return taskstate.Claim(task, ref.Step, ref.Attempt, "s2", "b", t0)
		}, taskstate.ErrNotQueued},
		{"expire other attempt", func(task *reevev1.Task, ref *reevev1.StepRef) error {
			return taskstate.RetryExpired(task, ref.Step, ref.Attempt+1, 0, "supervisor/x", t0.Add(time.Hour))
		}, taskstate.ErrStale},
		{"expire before complete-by", func(task *reevev1.Task, ref *reevev1.StepRef) error {
			return taskstate.FailExpired(task, ref.Step, ref.Attempt, "", "supervisor/x", t0)
		}, taskstate.ErrNotExpired},
		{"operator retry of a running step", func(task *reevev1.Task, ref *reevev1.StepRef) error {
			return taskstate.RetryFailed(task, ref.Step, 0, "", "operator", t0)
		}, taskstate.ErrWrongState},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task := taskstate.New("default", "t", orders(), nil, t0)
			ref := run(t, task, "reserve", t0)
			before := proto.Clone(task)
			if err := tc.do(task, ref); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !proto.Equal(before, task) {
				t.Fatal("a refused transition changed the task")
			}
		})
	}
}

func TestRetryBacksOffThenEscalates(t *testing.T) {
	task := taskstate.New("default", "t", orders(), nil, t0)
	ref := run(t, task, "reserve", t0)
	if err := taskstate.Fail(task, ref, "a", &reevev1.StepError{Message: "flaky"}, t0); err != nil {
		t.Fatal(err)
	}
	s := taskstate.FindStep(task, "reserve")
	if !taskstate.Queued(s) || s.GetAttempt() != 2 || s.GetFailureCount() != 1 || !s.GetNotBefore().AsTime().Equal(t0.Add(time.Second)) {
		t.Fatalf("after one failure: %v, want attempt 2 queued not before t0+1s", s)
	}
	if err := taskstate.Claim(task, "reserve", 2, "s1", "a", t0.Add(500*time.Millisecond)); !errors.Is(err, taskstate.ErrNotDue) {
		t.Fatalf("claim during backoff: %v, want ErrNotDue", err)
	}
	ref = run(t, task, "reserve", t0.Add(time.Second))
	// The second failure (an expiry) exhausts max_attempts 2: reserve
	// escalates as it says, fail.
	if action, _ := taskstate.Decide(task, s); action != taskstate.ActionFail {
		t.Fatalf("decision %v, want fail", action)
	}
	if err := taskstate.FailExpired(task, "reserve", ref.GetAttempt(), "", "supervisor/x", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if task.GetState() != reevev1.TaskState_TASK_STATE_FAILED || s.GetState() != reevev1.StepState_STEP_STATE_FAILED {
		t.Fatalf("task %v step %v, want FAILED", task.GetState(), s.GetState())
	}
	if got := states(task); got["charge"] != reevev1.StepState_STEP_STATE_SKIPPED {
		t.Fatalf("charge %v, want SKIPPED", got["charge"])
	}
}

func TestNonRetryableCodeEscalatesAtOnce(t *testing.T) {
	wf := orders()
	wf.DefaultRetryPolicy.NonRetryableErrorCodes = []string{"declined"}
	task := taskstate.New("default", "t", wf, nil, t0)
	ref := run(t, task, "reserve", t0)
	if err := taskstate.Fail(task, ref, "a", &reevev1.StepError{Code: "declined"}, t0); err != nil {
		t.Fatal(err)
	}
	if task.GetState() != reevev1.TaskState_TASK_STATE_FAILED {
		t.Fatalf("task %v, want FAILED on a non-retryable code", task.GetState())
	}
}

func TestCompensationRunsInReverseOrder(t *testing.T) {
	task := taskstate.New("default", "t", orders(), nil, t0)
	for _, name := range []string{"reserve", "charge"} {
		if err := taskstate.Complete(task, run(t, task, name, t0), "a", nil, t0); err != nil {
			t.Fatal(err)
		}
	}
	ship := run(t, task, "ship", t0)
	if err := taskstate.Fail(task, ship, "a", &reevev1.StepError{Message: "no carrier", NonRetryable: true}, t0); err != nil {
		t.Fatal(err)
	}
	if task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATING {
		t.Fatalf("task %v, want COMPENSATING", task.GetState())
	}
	// charge is undone first: reserve waits for it.
	if got := states(task); got["charge"] != reevev1.StepState_STEP_STATE_COMPENSATING || got["reserve"] != reevev1.StepState_STEP_STATE_SUCCEEDED {
		t.Fatalf("states %v, want charge compensating, reserve waiting", got)
	}
	charge := taskstate.FindStep(task, "charge")
	if taskstate.ExecutionType(task, charge) != "pay.refund" || charge.GetAttempt() != 2 {
		t.Fatalf("charge compensation type %q attempt %d, want pay.refund attempt 2", taskstate.ExecutionType(task, charge), charge.GetAttempt())
	}
	if err := taskstate.Complete(task, run(t, task, "charge", t0), "a", nil, t0); err != nil {
		t.Fatal(err)
	}
	if err := taskstate.Complete(task, run(t, task, "reserve", t0), "a", nil, t0); err != nil {
		t.Fatal(err)
	}
	got := states(task)
	if task.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED || got["reserve"] != reevev1.StepState_STEP_STATE_COMPENSATED ||
		got["charge"] != reevev1.StepState_STEP_STATE_COMPENSATED || got["ship"] != reevev1.StepState_STEP_STATE_FAILED {
		t.Fatalf("task %v steps %v", task.GetState(), got)
	}
}

func TestFailingCompensationFailsTask(t *testing.T) {
	task := taskstate.New("default", "t", orders(), nil, t0)
	if err := taskstate.Complete(task, run(t, task, "reserve", t0), "a", nil, t0); err != nil {
		t.Fatal(err)
	}
	charge := run(t, task, "charge", t0)
	// charge escalates by failing (default); give it compensate instead.
	taskstate.Spec(task, "charge").Escalation = reevev1.Escalation_ESCALATION_COMPENSATE
	if err := taskstate.Fail(task, charge, "a", &reevev1.StepError{NonRetryable: true}, t0); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // the compensation's max_attempts
		at := t0.Add(time.Duration(i+1) * time.Hour)
		ref := run(t, task, "reserve", at)
		if err := taskstate.Fail(task, ref, "a", &reevev1.StepError{Message: "refund service down"}, at); err != nil {
			t.Fatal(err)
		}
	}
	if task.GetState() != reevev1.TaskState_TASK_STATE_FAILED || taskstate.FindStep(task, "reserve").GetState() != reevev1.StepState_STEP_STATE_FAILED {
		t.Fatalf("task %v reserve %v, want FAILED after the compensation gave up", task.GetState(), taskstate.FindStep(task, "reserve").GetState())
	}
}

func TestWaitThenRetryStartsANewRound(t *testing.T) {
	wf := orders()
	wf.Steps[0].Escalation = reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY
	wf.Steps[0].EscalationWait = durationpb.New(time.Hour)
	task := taskstate.New("default", "t", wf, nil, t0)
	if err := taskstate.Fail(task, run(t, task, "reserve", t0), "a", &reevev1.StepError{NonRetryable: true}, t0); err != nil {
		t.Fatal(err)
	}
	s := taskstate.FindStep(task, "reserve")
	if !taskstate.Queued(s) || s.GetFailureCount() != 0 || !s.GetNotBefore().AsTime().Equal(t0.Add(time.Hour)) || task.GetState() != reevev1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("step %v task %v, want the next attempt queued after an hour with the failure count reset", s, task.GetState())
	}
	// The new round has the policy's attempts again: a retryable failure
	// backs off (1 s), it does not wait another hour.
	t1 := t0.Add(time.Hour)
	if err := taskstate.Fail(task, run(t, task, "reserve", t1), "a", &reevev1.StepError{Message: "flaky"}, t1); err != nil {
		t.Fatal(err)
	}
	if !taskstate.Queued(s) || s.GetFailureCount() != 1 || !s.GetNotBefore().AsTime().Equal(t1.Add(time.Second)) {
		t.Fatalf("step %v, want a retry after the 1 s backoff", s)
	}
	// The supervisor's path agrees: an expiry past the attempts, retried by
	// wait_then_retry, resets the count too.
	t2 := t1.Add(time.Second)
	ref := run(t, task, "reserve", t2)
	t3 := t2.Add(time.Hour)
	s2 := taskstate.FindStep(task, "reserve")
	if act, d := taskstate.Decide(task, s2); act != taskstate.ActionRetry || d != time.Hour {
		t.Fatalf("decide: %v %v, want retry after the escalation wait", act, d)
	}
	if err := taskstate.RetryExpired(task, "reserve", ref.GetAttempt(), time.Hour, "supervisor/x", t3); err != nil {
		t.Fatal(err)
	}
	if s2.GetFailureCount() != 0 {
		t.Fatalf("failure count %d after wait_then_retry by the supervisor, want 0", s2.GetFailureCount())
	}
}

func TestRevokedListsExecutionsTakenAway(t *testing.T) {
	wf := &reevev1.Workflow{Steps: []*reevev1.StepSpec{{Name: "a", Type: "t"}, {Name: "b", Type: "t"}}}
	task := taskstate.New("default", "t", wf, nil, t0)
	refA := run(t, task, "a", t0)
	run(t, task, "b", t0)
	before := proto.Clone(task).(*reevev1.Task)
	if err := taskstate.Fail(task, refA, "a", &reevev1.StepError{NonRetryable: true}, t0); err != nil {
		t.Fatal(err)
	}
	got := taskstate.Revoked(before, task, refA)
	if len(got) != 1 || got[0].Ref.GetStep() != "b" || got[0].AgentID != "a" {
		t.Fatalf("revoked %v, want b held by agent a", got)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	wf := &reevev1.Workflow{Steps: []*reevev1.StepSpec{{Name: "a", Type: "t", RetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 100}}}}
	task := taskstate.New("default", "t", wf, nil, t0)
	for i := range 99 {
		at := t0.Add(time.Duration(i) * time.Hour)
		if err := taskstate.Fail(task, run(t, task, "a", at), "a", &reevev1.StepError{}, at); err != nil {
			t.Fatal(err)
		}
	}
	if len(task.GetHistory()) != taskstate.MaxHistory || task.GetHistoryDropped() == 0 {
		t.Fatalf("history %d events, %d dropped; want %d kept", len(task.GetHistory()), task.GetHistoryDropped(), taskstate.MaxHistory)
	}
}
