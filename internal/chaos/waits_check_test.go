package chaos

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/chaos/workload"
)

// waitTask is a clean SUCCEEDED chaos.wait task that started at its start
// time, whose approve step was completed from outside by name, whose nap
// slept its second, and whose hook its agent deferred and a token holder
// completed.
func waitTask() *reevev1.Task {
	var wf *reevev1.Workflow
	for _, w := range workload.Workflows() {
		if w.GetName() == workload.WorkflowWait {
			wf = w
		}
	}
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	at := func(ms int, e *reevev1.HistoryEvent) *reevev1.HistoryEvent {
		e.Time = timestamppb.New(t0.Add(time.Duration(ms) * time.Millisecond))
		return e
	}
	return &reevev1.Task{
		Namespace: "default", Id: "w1", State: reevev1.TaskState_TASK_STATE_SUCCEEDED, Workflow: wf, StartTime: timestamppb.New(t0.Add(time.Second)),
		Steps: []*reevev1.Step{
			{Name: "a", State: reevev1.StepState_STEP_STATE_SUCCEEDED, Attempt: 1, IdempotencyKey: "k-a"},
			{Name: "approve", State: reevev1.StepState_STEP_STATE_SUCCEEDED, Attempt: 1, IdempotencyKey: "k-approve"},
			{Name: "nap", State: reevev1.StepState_STEP_STATE_SUCCEEDED, Attempt: 1, IdempotencyKey: "k-nap"},
			{Name: "hook", State: reevev1.StepState_STEP_STATE_SUCCEEDED, Attempt: 1, IdempotencyKey: "k-hook"},
		},
		History: []*reevev1.HistoryEvent{
			at(0, ev("task.start_scheduled", "", 0, "client")),
			at(1000, ev("task.started", "", 0, "supervisor/p1")),
			at(1001, ev("step.dispatched", "a", 1, "scheduler/s1")),
			at(1100, ev("step.succeeded", "a", 1, "agent/x")),
			at(1100, ev("step.waiting", "approve", 1, "scheduler")),
			at(1500, ev("step.succeeded", "approve", 1, "approver/approver")),
			at(1500, ev("step.sleeping", "nap", 1, "scheduler")),
			at(2500, ev("step.succeeded", "nap", 1, "supervisor/p1")),
			at(2501, ev("step.dispatched", "hook", 1, "scheduler/s1")),
			at(2600, ev("step.deferred", "hook", 1, "agent/x")),
			at(3000, ev("step.succeeded", "hook", 1, "token/client")),
			at(3000, ev("task.succeeded", "", 0, "token/client")),
		},
	}
}

// The wait checks catch what they claim to: each case breaks one
// invariant in an otherwise clean task.
func TestCheckTimersFindsViolations(t *testing.T) {
	cases := []struct {
		name, invariant string
		breakIt         func(*reevev1.Task)
	}{
		{"clean", "", func(*reevev1.Task) {}},
		{"completed from outside twice", "a completion is applied once", func(tk *reevev1.Task) {
			tk.History = slices.Insert(tk.History, 6, ev("step.failed", "approve", 1, "token/client"))
		}},
		{"sleep ended early", "a sleep never ends early", func(tk *reevev1.Task) {
			tk.History[7].Time = timestamppb.New(tk.History[6].GetTime().AsTime().Add(900 * time.Millisecond))
		}},
		{"dispatched before the start time", "a delayed task starts at its start time", func(tk *reevev1.Task) {
			tk.History[2].Time = timestamppb.New(tk.GetStartTime().AsTime().Add(-time.Second))
		}},
		{"deadline fired early", "a task deadline never fires early", func(tk *reevev1.Task) {
			tk.Deadline = timestamppb.New(tk.History[11].GetTime().AsTime().Add(time.Second))
			tk.History = append(tk.History, &reevev1.HistoryEvent{Kind: "task.timed_out", Actor: "supervisor/p1", Time: tk.History[11].GetTime()})
		}},
		{"wait left over", "every wait ends", func(tk *reevev1.Task) {
			tk.Steps[1].State = reevev1.StepState_STEP_STATE_WAITING
		}},
		{"deferral left over", "every wait ends", func(tk *reevev1.Task) {
			tk.Steps[3].State, tk.Steps[3].Deferred = reevev1.StepState_STEP_STATE_RUNNING, true
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk := waitTask()
			c.breakIt(tk)
			rep := &Report{}
			checkTimers(tk, rep)
			if c.invariant == "" {
				if !rep.OK() {
					t.Fatalf("clean task: %+v", rep.Violations)
				}
				w := rep.Waits
				if w.CompletedFromOutside != 2 || w.Sleeps != 1 || w.DelayedStarts != 1 || w.Deferred != 1 {
					t.Fatalf("counts %+v", w)
				}
				return
			}
			if len(rep.Violations) != 1 || rep.Violations[0].Invariant != c.invariant {
				t.Fatalf("violations %+v, want one of %q", rep.Violations, c.invariant)
			}
		})
	}
}

// A completion the load had answered OK must be in the history once, with
// the outcome it was answered.
func TestCheckAppliedFindsLostCompletions(t *testing.T) {
	tasks := map[string]*reevev1.Task{"w1": waitTask()}
	ok := completionRecord{Task: "w1", Step: "approve", Attempt: 1, State: reevev1.StepState_STEP_STATE_SUCCEEDED, ByName: true}
	for _, c := range []struct {
		name string
		rec  completionRecord
		bad  bool
	}{
		{"applied", ok, false},
		{"another attempt", completionRecord{Task: "w1", Step: "approve", Attempt: 2, State: reevev1.StepState_STEP_STATE_SUCCEEDED}, true},
		{"another outcome", completionRecord{Task: "w1", Step: "hook", Attempt: 1, State: reevev1.StepState_STEP_STATE_FAILED}, true},
		{"never recorded", completionRecord{Task: "w1", Step: "nap", Attempt: 1, State: reevev1.StepState_STEP_STATE_SUCCEEDED}, true},
	} {
		rep := &Report{}
		checkApplied(tasks, &waitLog{applied: []completionRecord{c.rec}}, rep)
		if got := !rep.OK(); got != c.bad {
			t.Errorf("%s: violations %+v", c.name, rep.Violations)
		}
	}
}

// Steps completed from outside and sleeps ran on no agent: the side-effect
// check does not ask them for a side effect; the deferred hook's
// execution logged one.
func TestSideEffectsExemptStepsCompletedFromOutside(t *testing.T) {
	dir := t.TempDir()
	tk := waitTask()
	log, err := workload.OpenSideEffectLog(filepath.Join(dir, "agent-1.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"a", "hook"} {
		if err := log.Append(workload.SideEffect{Key: "k-" + s, Task: "w1", Step: s, Attempt: 1, Agent: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	log.Close()
	rep := &Report{}
	if err := checkSideEffects(dir, map[string]*reevev1.Task{"w1": tk}, rep); err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("violations %+v", rep.Violations)
	}
	// An agent's success without its side effect is still found.
	bad := proto.Clone(tk).(*reevev1.Task)
	bad.History[3].Actor = "agent/x"
	bad.History[5].Actor = "agent/x" // approve "succeeded" by an agent: no side effect
	rep = &Report{}
	if err := checkSideEffects(dir, map[string]*reevev1.Task{"w1": bad}, rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) != 1 || rep.Violations[0].Step != "approve" {
		t.Fatalf("violations %+v, want one for approve", rep.Violations)
	}
	_ = os.Remove(filepath.Join(dir, "agent-1.jsonl"))
}

// A share of the plan waits, every variant is there, and the plan is a
// function of the seed.
func TestPlanWaits(t *testing.T) {
	plan := planTasks(planRNG(9), Config{Seed: 9, Tasks: 300, FailShare: 0.2, TransientPerMille: 50, WideTasks: 5})
	n, never, errs, twice, byName, start, timeout, skip := 0, 0, 0, 0, 0, 0, 0, 0
	for _, pt := range plan {
		if pt.Workflow != workload.WorkflowWait {
			continue
		}
		n++
		w := pt.Wait
		for _, a := range []waitAction{w.Approve, w.Hook} {
			if a.Never {
				never++
			}
			if a.Error {
				errs++
			}
			if a.Twice {
				twice++
			}
			if a.ByName {
				byName++
			}
			if a.SkipFirst {
				skip++
			}
		}
		if w.StartIn > 0 {
			start++
		}
		if w.TaskTimeout > 0 {
			timeout++
		}
		if pt.OperatorRetry || (pt.Input.FailStep != "" && pt.Input.FailStep != workload.WaitStepFirst) {
			t.Fatalf("%s: %+v", pt.ID, pt)
		}
	}
	if n < 20 || never == 0 || errs == 0 || twice == 0 || byName == 0 || start == 0 || timeout == 0 || skip == 0 {
		t.Fatalf("%d wait tasks: never %d, errors %d, twice %d, by name %d, delayed %d, deadlines %d, skip first %d", n, never, errs, twice, byName, start, timeout, skip)
	}
}

// The callback book reads the tokens agents pass on as the files grow,
// whole lines only.
func TestCallbackBookReadsWholeLines(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent-1.jsonl"+workload.CallbackSuffix)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := newCallbackBook(dir)
	if _, err := f.WriteString(`{"task":"w1","step":"hook","attempt":1,"token":"t1"}` + "\n" + `{"task":"w1","step":"hook","att`); err != nil {
		t.Fatal(err)
	}
	if got := b.lookup("w1", "hook", 1); got != "t1" {
		t.Fatalf("attempt 1: %q", got)
	}
	if got := b.lookup("w1", "hook", 2); got != "" {
		t.Fatalf("attempt 2 from a torn line: %q", got)
	}
	if _, err := f.WriteString(`empt":2,"token":"t2"}` + "\n"); err != nil {
		t.Fatal(err)
	}
	if got := b.lookup("w1", "hook", 2); got != "t2" {
		t.Fatalf("attempt 2 once whole: %q", got)
	}
}
