package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/chaos/workload"
	"github.com/reeve-org/reeve/internal/etcdtest"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
)

// ev is a history event.
func ev(kind, step string, attempt int32, actor string) *reevev1.HistoryEvent {
	return &reevev1.HistoryEvent{Kind: kind, Step: step, Attempt: attempt, Actor: actor}
}

// compensatedTask is a clean COMPENSATED task: a and b succeeded, c failed
// for good, b then a were compensated.
func compensatedTask() *reevev1.Task {
	return &reevev1.Task{
		Namespace: "default", Id: "t1", State: reevev1.TaskState_TASK_STATE_COMPENSATED, Workflow: workload.Workflows()[0],
		Steps: []*reevev1.Step{
			{Name: "a", State: reevev1.StepState_STEP_STATE_COMPENSATED, Attempt: 3, IdempotencyKey: "k-a", Compensation: true},
			{Name: "b", State: reevev1.StepState_STEP_STATE_COMPENSATED, Attempt: 2, IdempotencyKey: "k-b", Compensation: true},
			{Name: "c", State: reevev1.StepState_STEP_STATE_FAILED, Attempt: 1, IdempotencyKey: "k-c"},
		},
		History: []*reevev1.HistoryEvent{
			ev("step.dispatched", "a", 1, "scheduler/s1"),
			ev("step.expired", "a", 1, "supervisor/p1"),
			ev("step.retry_scheduled", "a", 2, "supervisor/p1"),
			ev("step.succeeded", "a", 2, "agent/x"),
			ev("step.succeeded", "b", 1, "agent/x"),
			ev("step.failed", "c", 1, "agent/y"),
			ev("step.escalated", "c", 1, "agent/y"),
			ev("compensation.succeeded", "b", 2, "agent/x"),
			ev("compensation.succeeded", "a", 3, "agent/y"),
		},
	}
}

// The checker must catch what it claims to: each case breaks one
// invariant in an otherwise clean task.
func TestCheckHistoryFindsViolations(t *testing.T) {
	cases := []struct {
		name, invariant string
		breakIt         func(*reevev1.Task)
	}{
		{"clean", "", func(*reevev1.Task) {}},
		{"result accepted twice", "no result accepted twice", func(tk *reevev1.Task) {
			tk.History = slices.Insert(tk.History, 4, ev("step.failed", "a", 2, "agent/z"))
		}},
		{"step succeeded twice", "no result accepted twice", func(tk *reevev1.Task) {
			tk.History = slices.Insert(tk.History, 5, ev("step.succeeded", "a", 1, "agent/z"))
		}},
		{"two leaders", "one leader acts on an execution", func(tk *reevev1.Task) {
			tk.History = slices.Insert(tk.History, 2, ev("step.expired", "a", 1, "supervisor/p2"))
		}},
		{"compensated in dependency order", "compensated exactly once, in reverse order", func(tk *reevev1.Task) {
			tk.History[7], tk.History[8] = tk.History[8], tk.History[7]
		}},
		{"compensated twice", "compensated exactly once, in reverse order", func(tk *reevev1.Task) {
			tk.History = append(tk.History, ev("compensation.succeeded", "a", 4, "agent/y"))
		}},
		{"succeeded step never compensated", "compensated exactly once, in reverse order", func(tk *reevev1.Task) {
			tk.History = tk.History[:8]
			tk.Steps[0].State = reevev1.StepState_STEP_STATE_SUCCEEDED
		}},
		{"history dropped", "history complete", func(tk *reevev1.Task) { tk.HistoryDropped = 3 }},
		{"dispatched while paused", "nothing dispatched while paused", func(tk *reevev1.Task) {
			tk.History = slices.Insert(tk.History, 0, ev("task.paused", "", 0, "operator"))
		}},
		{"dispatched after the resume", "", func(tk *reevev1.Task) {
			tk.History = slices.Insert(tk.History, 0, ev("task.paused", "", 0, "operator"), ev("task.resumed", "", 0, "operator"))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tk := compensatedTask()
			tc.breakIt(tk)
			rep := &Report{}
			checkHistory(tk, rep)
			var got []string
			for _, v := range rep.Violations {
				got = append(got, v.Invariant)
			}
			if tc.invariant == "" && len(got) > 0 || tc.invariant != "" && !slices.Contains(got, tc.invariant) {
				t.Fatalf("violations %q, want %q", got, tc.invariant)
			}
		})
	}
}

func TestCheckSideEffectsFindsViolations(t *testing.T) {
	tasks := map[string]*reevev1.Task{"t1": compensatedTask()}
	good := []workload.SideEffect{
		{Key: "k-a", Task: "t1", Step: "a", Attempt: 1}, // superseded: expired
		{Key: "k-a", Task: "t1", Step: "a", Attempt: 2},
		{Key: "k-b", Task: "t1", Step: "b", Attempt: 1},
		{Key: "k-c", Task: "t1", Step: "c", Attempt: 1},
		{Key: "k-b:compensate", Task: "t1", Step: "b", Attempt: 2, Compensation: true},
		{Key: "k-a:compensate", Task: "t1", Step: "a", Attempt: 3, Compensation: true},
	}
	cases := []struct {
		name  string
		lines []workload.SideEffect
		want  int
	}{
		{"clean", good, 0},
		{"unknown task", append(slices.Clone(good), workload.SideEffect{Key: "k", Task: "t9", Step: "a", Attempt: 1}), 1},
		{"unknown step", append(slices.Clone(good), workload.SideEffect{Key: "k-a", Task: "t1", Step: "z", Attempt: 1}), 1},
		{"future attempt", append(slices.Clone(good), workload.SideEffect{Key: "k-c", Task: "t1", Step: "c", Attempt: 2}), 1},
		{"wrong key", append(slices.Clone(good), workload.SideEffect{Key: "k-b", Task: "t1", Step: "a", Attempt: 1}), 1},
		{"compensation of a step never compensated", append(slices.Clone(good), workload.SideEffect{Key: "k-c:compensate", Task: "t1", Step: "c", Attempt: 1, Compensation: true}), 1},
		{"expired attempt that logged nothing", good[1:], 0},
		{"accepted success without side effect", slices.Delete(slices.Clone(good), 2, 3), 1},
		{"accepted attempt executed twice", append(slices.Clone(good), good[2]), 1},
		{"expired attempt executed twice", append(slices.Clone(good), good[0]), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			log, err := workload.OpenSideEffectLog(filepath.Join(dir, "agent-1.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range tc.lines {
				if err := log.Append(e); err != nil {
					t.Fatal(err)
				}
			}
			log.Close()
			rep := &Report{}
			if err := checkSideEffects(dir, tasks, rep); err != nil {
				t.Fatal(err)
			}
			if len(rep.Violations) != tc.want {
				t.Fatalf("violations %+v, want %d", rep.Violations, tc.want)
			}
		})
	}
}

// A torn last line (an agent killed mid-write) is counted, not a violation.
func TestCheckSideEffectsToleratesATornLine(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "agent-1.jsonl"), []byte(`{"key":"k-a","task":"t1","step":"a","attempt":2}`+"\n"+`{"key":"k-b","ta`), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := &Report{}
	if err := checkSideEffects(dir, map[string]*reevev1.Task{}, rep); err != nil {
		t.Fatal(err)
	}
	if rep.SideEffectsTorn != 1 || rep.SideEffects != 1 {
		t.Fatalf("torn %d, logged %d; want 1 and 1", rep.SideEffectsTorn, rep.SideEffects)
	}
}

// The sampler reports a running step whose deadline key is missing, and one
// overdue beyond the window, and accepts a running step with its key.
func TestSamplerFindsRunningStepsWithoutDeadline(t *testing.T) {
	cli := etcdtest.New(t).Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	now := time.Now()
	put := func(id string, completeBy time.Time, withKey bool) {
		tk := &reevev1.Task{Namespace: "default", Id: id, State: reevev1.TaskState_TASK_STATE_RUNNING, Steps: []*reevev1.Step{
			{Name: "a", State: reevev1.StepState_STEP_STATE_RUNNING, Attempt: 1, CompleteBy: timestamppb.New(completeBy), LockedByAgent: "x"},
		}}
		b, err := proto.Marshal(&storev1.TaskRecord{Task: tk})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, layout.Task("default", id), string(b)); err != nil {
			t.Fatal(err)
		}
		if withKey {
			if _, err := cli.Put(ctx, layout.Deadline(completeBy, "default", id, "a", 1), ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	put("ok", now.Add(time.Minute), true)
	put("nokey", now.Add(time.Minute), false)
	put("overdue", now.Add(-time.Minute), true)
	s := newSampler(cli, 30*time.Second)
	s.sample(ctx)
	rep := &Report{}
	s.report(rep)
	var got []string
	for _, v := range rep.Violations {
		got = append(got, v.Task)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"nokey", "overdue"}) || rep.Samples != 1 {
		t.Fatalf("violations in %v after %d samples, want nokey and overdue after 1", got, rep.Samples)
	}
}

// A seed fixes the fault schedule and the tasks' designed behaviour.
func TestSeedFixesScheduleAndPlan(t *testing.T) {
	schedule := func(seed uint64) []decision {
		rng := faultRNG(seed)
		var out []decision
		for range 200 {
			out = append(out, nextDecision(rng, time.Second))
		}
		return out
	}
	if a, b := schedule(42), schedule(42); !slices.Equal(a, b) {
		t.Fatal("same seed, different fault schedules")
	}
	if a, b := schedule(42), schedule(43); slices.Equal(a, b) {
		t.Fatal("different seeds, same fault schedule")
	}
	plan := func(seed uint64) []plannedTask {
		return planTasks(planRNG(seed), Config{Seed: seed, Tasks: 500, FailShare: 0.2, TransientPerMille: 50})
	}
	a := plan(42)
	if !slices.Equal(a, plan(42)) {
		t.Fatal("same seed, different task plans")
	}
	failing := 0
	for _, pt := range a {
		if pt.Input.FailStep != "" {
			failing++
		}
	}
	if failing < 60 || failing > 140 {
		t.Fatalf("%d of 500 tasks designed to fail, want about 20%%", failing)
	}
}

// More history invariants: an operator retry only of a FAILED task at rest,
// nothing undone that never succeeded.
func TestCheckHistoryOperatorRetryAndUndo(t *testing.T) {
	retried := func() *reevev1.Task {
		return &reevev1.Task{
			Namespace: "default", Id: "r1", State: reevev1.TaskState_TASK_STATE_SUCCEEDED, Workflow: workload.Workflows()[1],
			History: []*reevev1.HistoryEvent{
				ev("task.submitted", "", 0, "client"),
				ev("step.dispatched", "a", 1, "scheduler/s1"),
				ev("step.succeeded", "a", 1, "agent/x"),
				ev("step.dispatched", "b", 1, "scheduler/s1"),
				ev("step.failed", "b", 1, "agent/x"),
				ev("task.failed", "", 0, "agent/x"),
				ev("step.retried_by_operator", "b", 2, "operator"),
				ev("step.dispatched", "b", 2, "scheduler/s1"),
				ev("step.succeeded", "b", 2, "agent/x"),
				ev("step.dispatched", "c", 1, "scheduler/s1"),
				ev("step.succeeded", "c", 1, "agent/x"),
				ev("task.succeeded", "", 0, "scheduler"),
			},
		}
	}
	cases := []struct {
		name, invariant string
		breakIt         func(*reevev1.Task)
	}{
		{"clean", "", func(*reevev1.Task) {}},
		{"retry of a running task", "operator retry only of a FAILED task", func(tk *reevev1.Task) {
			tk.History = slices.Insert(tk.History, 3, ev("step.retried_by_operator", "a", 1, "operator"))
		}},
		{"second retry without a failure", "operator retry only of a FAILED task", func(tk *reevev1.Task) {
			tk.History = slices.Insert(tk.History, 8, ev("step.retried_by_operator", "b", 3, "operator"))
		}},
		{"dispatch between failure and retry", "operator retry only of a FAILED task", func(tk *reevev1.Task) {
			tk.History = slices.Insert(tk.History, 6, ev("step.dispatched", "c", 1, "scheduler/s1"))
		}},
		{"undone without success", "nothing undone that never succeeded", func(tk *reevev1.Task) {
			tk.State = reevev1.TaskState_TASK_STATE_COMPENSATED
			tk.History = slices.Insert(tk.History, 2, ev("compensation.succeeded", "a", 2, "agent/x"))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tk := retried()
			tc.breakIt(tk)
			rep := &Report{}
			checkHistory(tk, rep)
			var got []string
			for _, v := range rep.Violations {
				got = append(got, v.Invariant)
			}
			if tc.invariant == "" && len(got) > 0 || tc.invariant != "" && !slices.Contains(got, tc.invariant) {
				t.Fatalf("violations %q, want %q", got, tc.invariant)
			}
		})
	}
}

// A wide task: only steps with a compensation are undone, the join before
// the roots it depends on.
func TestCheckHistoryWideCompensation(t *testing.T) {
	wide := func() *reevev1.Task {
		tk := &reevev1.Task{Namespace: "default", Id: "w1", State: reevev1.TaskState_TASK_STATE_COMPENSATED, Workflow: workload.Workflows()[2],
			History: []*reevev1.HistoryEvent{
				ev("step.succeeded", "w00", 1, "agent/x"),
				ev("step.succeeded", "w01", 1, "agent/x"),
				ev("step.succeeded", workload.WideJoin, 1, "agent/x"),
				ev("task.compensating", "", 0, "operator"),
				ev("compensation.succeeded", workload.WideJoin, 2, "agent/x"),
				ev("compensation.succeeded", "w00", 2, "agent/x"),
			}}
		for _, n := range workload.WideStepNames() {
			st := &reevev1.Step{Name: n, State: reevev1.StepState_STEP_STATE_SKIPPED}
			switch n {
			case "w00", workload.WideJoin:
				st.State = reevev1.StepState_STEP_STATE_COMPENSATED
			case "w01":
				st.State = reevev1.StepState_STEP_STATE_SUCCEEDED // no compensation
			}
			tk.Steps = append(tk.Steps, st)
		}
		return tk
	}
	const inv = "compensated exactly once, in reverse order"
	cases := []struct {
		name, invariant string
		breakIt         func(*reevev1.Task)
	}{
		{"clean", "", func(*reevev1.Task) {}},
		{"root undone before the join", inv, func(tk *reevev1.Task) { tk.History[4], tk.History[5] = tk.History[5], tk.History[4] }},
		{"step without compensation undone", inv, func(tk *reevev1.Task) {
			tk.History = append(tk.History, ev("compensation.succeeded", "w01", 2, "agent/x"))
		}},
		{"compensable root never undone", inv, func(tk *reevev1.Task) { tk.History = tk.History[:5] }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tk := wide()
			tc.breakIt(tk)
			rep := &Report{}
			checkHistory(tk, rep)
			var got []string
			for _, v := range rep.Violations {
				got = append(got, v.Invariant)
			}
			if tc.invariant == "" && len(got) > 0 || tc.invariant != "" && !slices.Contains(got, tc.invariant) {
				t.Fatalf("violations %q, want %q", got, tc.invariant)
			}
		})
	}
}

// A task of the retry share: retried, it must end SUCCEEDED; its fail step
// never succeeds at an attempt the agent fails.
func TestCheckRetried(t *testing.T) {
	pt := plannedTask{ID: "r1", Workflow: workload.WorkflowFail, OperatorRetry: true, Input: workload.Input{FailStep: "b", FailUntilAttempt: workload.MaxAttempts}}
	task := func(state reevev1.TaskState, events ...*reevev1.HistoryEvent) *reevev1.Task {
		return &reevev1.Task{Id: "r1", State: state, History: events}
	}
	retry := ev("step.retried_by_operator", "b", 6, "operator")
	cases := []struct {
		name       string
		task       *reevev1.Task
		violations int
		retried    int
	}{
		{"retried, succeeded", task(reevev1.TaskState_TASK_STATE_SUCCEEDED, retry, ev("step.succeeded", "b", 7, "agent/x")), 0, 1},
		{"retried, still failed", task(reevev1.TaskState_TASK_STATE_FAILED, retry), 1, 1},
		{"never retried, failed", task(reevev1.TaskState_TASK_STATE_FAILED), 1, 0},
		{"first round succeeded past its failing attempts", task(reevev1.TaskState_TASK_STATE_SUCCEEDED, ev("step.succeeded", "b", 7, "agent/x")), 0, 0},
		{"success at a failing attempt", task(reevev1.TaskState_TASK_STATE_SUCCEEDED, ev("step.succeeded", "b", 3, "agent/x")), 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := &Report{}
			checkRetried(tc.task, pt, rep)
			if len(rep.Violations) != tc.violations || rep.TasksRetried != tc.retried {
				t.Fatalf("violations %+v, retried %d; want %d violations, %d retried", rep.Violations, rep.TasksRetried, tc.violations, tc.retried)
			}
		})
	}
}

// The pager puts a history together from record versions, and says so
// when a version it needed was never seen.
func TestHistoryPagerJoinsVersions(t *testing.T) {
	events := func(from, to int) []*reevev1.HistoryEvent {
		var out []*reevev1.HistoryEvent
		for i := from; i < to; i++ {
			out = append(out, ev(fmt.Sprintf("e%d", i), "", 0, "x"))
		}
		return out
	}
	version := func(from, to int) *reevev1.Task {
		return &reevev1.Task{Id: "w", History: events(from, to), HistoryDropped: int32(from)}
	}
	h := newHistoryPager(nil, "")
	h.addTask(version(0, 200))
	h.addTask(version(100, 300))
	full, why := h.full(version(150, 350))
	if why != "" || len(full.GetHistory()) != 350 || full.GetHistoryDropped() != 0 || full.GetHistory()[349].GetKind() != "e349" {
		t.Fatalf("got %d events (dropped %d), %q; want all 350", len(full.GetHistory()), full.GetHistoryDropped(), why)
	}
	h = newHistoryPager(nil, "")
	h.addTask(version(0, 200))
	if _, why := h.full(version(201, 401)); why == "" {
		t.Fatal("event 200 was never seen, yet the history was called complete")
	}
}

// The plan: a retry share of about 5 % on the fail variant, never with a
// cancel or compensate; wrong-point retries on another step; the wide
// tasks spread over the run.
func TestPlanRetryAndWideShares(t *testing.T) {
	plan := planTasks(planRNG(7), Config{Seed: 7, Tasks: 2000, FailShare: 0.2, TransientPerMille: 50, WideTasks: 20})
	retry, wrong, wide := 0, 0, 0
	for i, pt := range plan {
		switch pt.Workflow {
		case workload.WorkflowWide:
			wide++
			if i == 0 || i == len(plan)-1 {
				t.Errorf("wide task at position %d: want them spread", i)
			}
		case workload.WorkflowFail:
			retry++
			if !pt.OperatorRetry || pt.CancelAfter > 0 || pt.CompensateAfter > 0 || pt.Input.FailUntilAttempt != workload.MaxAttempts || pt.Input.FailStep == "" {
				t.Errorf("retry task %+v", pt)
			}
			if pt.RetryWrongAfter > 0 {
				wrong++
				if pt.RetryWrongStep == pt.Input.FailStep || !slices.Contains(workload.StepNames, pt.RetryWrongStep) {
					t.Errorf("wrong-point retry of step %q, fail step %q", pt.RetryWrongStep, pt.Input.FailStep)
				}
			}
		}
	}
	if wide != 20 || retry < 60 || retry > 110 || wrong < retry/4 || wrong > 3*retry/4 {
		t.Fatalf("%d wide, %d retry (%d with wrong-point retries); want 20, about 90, about half", wide, retry, wrong)
	}
}

// The wide workflow needs more operations per transaction than etcd's
// default allows, and no more than the chaos cluster's members allow.
func TestWideWorkflowFitsTheRaisedLimit(t *testing.T) {
	ops, width, compWidth := store.WorstCaseOps(workload.Workflows()[2])
	if width != workload.WideWidth || ops <= store.DefaultMaxTxnOps || ops > workload.MaxTxnOps {
		t.Fatalf("wide workflow: width %d (compensable %d), %d operations; want width %d, more than %d and at most %d", width, compWidth, ops, workload.WideWidth, store.DefaultMaxTxnOps, workload.MaxTxnOps)
	}
}
