package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/chaos/workload"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

// Work that waits, end to end on a real scheduler, supervisor, chaos agent
// and etcd without faults: the load completes approve by token (twice: the
// repeat is answered as the first) and by name (once with an error: the
// task is compensated), the hook the agent deferred by token (the one it
// passed on, sent at once, and one read as an approver) and by name,
// a delayed start starts, the nap sleeps its second, a task deadline fires
// before the load answers (its completion is refused); the checker finds
// nothing wrong and counts all of it.
func TestWaitsEndToEnd(t *testing.T) {
	env, s, cfg := startChaosEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := func(id string, p waitPlan) plannedTask {
		return plannedTask{ID: id, Workflow: workload.WorkflowWait, Input: workload.Input{WorkMillis: 20}, Wait: p}
	}
	plan := []plannedTask{
		w("w-token", waitPlan{Approve: waitAction{Twice: true}, Hook: waitAction{FromAgent: true}, StartIn: time.Second}),
		w("w-name-error", waitPlan{Approve: waitAction{ByName: true, Error: true}}),
		w("w-hook-name", waitPlan{Approve: waitAction{ByName: true}, Hook: waitAction{ByName: true, Twice: true}}),
		w("w-deadline", waitPlan{Approve: waitAction{After: 4 * time.Second}, TaskTimeout: 2 * time.Second}),
	}
	waits := &waitLog{book: newCallbackBook(cfg.sideEffectDir())}
	n, err := submit(ctx, []string{s.Addr}, tlsconfig.Files{}, tlsconfig.Files{}, tlsconfig.Files{}, plan, 100, &operatorLog{}, waits, t.Logf)
	if err != nil || n != len(plan) {
		t.Fatalf("submitted %d of %d: %v", n, len(plan), err)
	}
	cli := env.Etcd.Client()
	if _, err := waitDrained(ctx, taskread.New(store.New(cli), nil), len(plan), time.Minute); err != nil {
		t.Fatal(err)
	}
	rep := &Report{}
	waits.report(rep)
	if err := check(ctx, cli, taskread.New(store.New(cli), nil), cfg, plan, newHistoryPager(cli, "none/"), waits, rep); err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("violations: %+v", rep.Violations)
	}
	got := rep.Waits
	if got.Tasks != 4 || got.States["SUCCEEDED"] != 2 || got.States["COMPENSATED"] != 2 {
		t.Fatalf("states %v of %d tasks; want w-token and w-hook-name SUCCEEDED, the others COMPENSATED", got.States, got.Tasks)
	}
	type counts struct{ ByToken, ByName, Errors, Repeats, Refused, Outside, Sleeps, Starts, Timeouts int }
	want := counts{ByToken: 2, ByName: 3, Errors: 1, Repeats: 2, Refused: 1, Outside: 5, Sleeps: 2, Starts: 1, Timeouts: 1}
	if c := (counts{got.CompletedByToken, got.CompletedByName, got.CompletedWithError, got.RepeatsAnsweredAsFirst, got.CompletionsRefused,
		got.CompletedFromOutside, got.Sleeps, got.DelayedStarts, got.TaskTimeouts}); c != want || got.Deferred < 2 {
		t.Fatalf("counts %+v (deferred %d), want %+v (deferred ≥ 2)", c, got.Deferred, want)
	}
	if got.TokensFromAgent != 1 {
		t.Fatalf("%d hook tokens passed on by the agent were sent, want 1 (w-token's)", got.TokensFromAgent)
	}
}
