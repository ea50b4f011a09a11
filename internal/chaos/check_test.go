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

	storev1 "github.com/reeve-org/reeve/gen/reeve/store/v1"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
)

// ev is a history event.
func ev(kind, step string, attempt int32, actor string) *reevev1.HistoryEvent {
	return &reevev1.HistoryEvent{Kind: kind, Step: step, Attempt: attempt, Actor: actor}
}

// compensatedTask is a clean COMPENSATED task: a and b succeeded, c failed
// for good, b then a were compensated.
func compensatedTask() *reevev1.Task {
	return &reevev1.Task{
		Namespace: "default", Id: "t1", State: reevev1.TaskState_TASK_STATE_COMPENSATED,
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
	good := []SideEffect{
		{Key: "k-a", Task: "t1", Step: "a", Attempt: 1}, // superseded: expired
		{Key: "k-a", Task: "t1", Step: "a", Attempt: 2},
		{Key: "k-b", Task: "t1", Step: "b", Attempt: 1},
		{Key: "k-c", Task: "t1", Step: "c", Attempt: 1},
		{Key: "k-b:compensate", Task: "t1", Step: "b", Attempt: 2, Compensation: true},
		{Key: "k-a:compensate", Task: "t1", Step: "a", Attempt: 3, Compensation: true},
	}
	cases := []struct {
		name  string
		lines []SideEffect
		want  int
	}{
		{"clean", good, 0},
		{"unknown task", append(slices.Clone(good), SideEffect{Key: "k", Task: "t9", Step: "a", Attempt: 1}), 1},
		{"unknown step", append(slices.Clone(good), SideEffect{Key: "k-a", Task: "t1", Step: "z", Attempt: 1}), 1},
		{"future attempt", append(slices.Clone(good), SideEffect{Key: "k-c", Task: "t1", Step: "c", Attempt: 2}), 1},
		{"wrong key", append(slices.Clone(good), SideEffect{Key: "k-b", Task: "t1", Step: "a", Attempt: 1}), 1},
		{"compensation of a step never compensated", append(slices.Clone(good), SideEffect{Key: "k-c:compensate", Task: "t1", Step: "c", Attempt: 1, Compensation: true}), 1},
		{"expired attempt that logged nothing", good[1:], 0},
		{"accepted success without side effect", slices.Delete(slices.Clone(good), 2, 3), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			log, err := OpenSideEffectLog(filepath.Join(dir, "agent-1.jsonl"))
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
		if _, err := cli.Put(ctx, "/reeve/tasks/default/"+id, string(b)); err != nil {
			t.Fatal(err)
		}
		if withKey {
			if _, err := cli.Put(ctx, fmt.Sprintf("/reeve/deadlines/%020d/default/%s/a/1", completeBy.UnixNano(), id), ""); err != nil {
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
