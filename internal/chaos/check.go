package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	storev1 "github.com/reeve-org/reeve/gen/reeve/store/v1"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/verify"
)

// check reads every task and the side-effect logs and records violations
// and counts in rep. It returns an error only if it cannot read.
func check(ctx context.Context, cli *clientv3.Client, cfg Config, plan []plannedTask, rep *Report) error {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := cli.Get(rctx, "/reeve/tasks/default/", clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("chaos: read tasks: %w", err)
	}
	tasks := map[string]*reevev1.Task{}
	for _, kv := range resp.Kvs {
		var rec storev1.TaskRecord
		if err := proto.Unmarshal(kv.Value, &rec); err != nil {
			return fmt.Errorf("chaos: task %s: %w", kv.Key, err)
		}
		tasks[rec.GetTask().GetId()] = rec.GetTask()
	}
	rep.States = map[string]int{}
	for _, pt := range plan {
		t := tasks[pt.ID]
		if t == nil {
			if pt.ID != "" {
				rep.violate("every task terminal", pt.ID, "task missing from etcd")
			}
			continue
		}
		state := strings.TrimPrefix(t.GetState().String(), "TASK_STATE_")
		rep.States[state]++
		if !taskstate.TerminalTask(t.GetState()) {
			rep.violate("every task terminal", pt.ID, "task is "+t.GetState().String())
		}
		if pt.CancelAfter > 0 {
			rep.OperatorCancels++
		} else if t.GetState() == reevev1.TaskState_TASK_STATE_CANCELED {
			rep.violate("canceled only by an operator", pt.ID, "no operator canceled the task, yet it is CANCELED")
		}
		if pt.CompensateAfter > 0 {
			rep.OperatorCompensations++
			if t.GetState() == reevev1.TaskState_TASK_STATE_COMPENSATED {
				rep.CompensatedByOperator++
			}
		}
		if pt.Input.FailStep != "" {
			rep.DesignedToFail++
			if t.GetState() == reevev1.TaskState_TASK_STATE_SUCCEEDED {
				rep.violate("designed failure not ignored", pt.ID, "step "+pt.Input.FailStep+" always fails for good, yet the task SUCCEEDED")
			}
		} else if t.GetState() == reevev1.TaskState_TASK_STATE_COMPENSATED && pt.CompensateAfter == 0 {
			rep.CompensatedByFaults++
		}
		checkHistory(t, rep)
	}
	return checkSideEffects(cfg.sideEffectDir(), tasks, rep)
}

type execKey struct {
	step    string
	attempt int32
}

// checkHistory checks one task's history: results accepted at most once,
// supervisor actions by one leader per execution, and for a COMPENSATED
// task every succeeded step compensated exactly once, in reverse order.
func checkHistory(t *reevev1.Task, rep *Report) {
	id := t.GetId()
	if t.GetHistoryDropped() > 0 {
		rep.violate("history complete", id, fmt.Sprintf("%d history events dropped: cannot verify", t.GetHistoryDropped()))
	}
	results := map[execKey][]string{}
	supervisors := map[execKey][]string{}
	succeeded := map[string]int{}
	compensated := map[string]int{}
	var succeededOrder, compensatedOrder []string
	for _, ev := range t.GetHistory() {
		k := execKey{ev.GetStep(), ev.GetAttempt()}
		switch {
		case strings.HasPrefix(ev.GetActor(), "agent/") && (strings.HasSuffix(ev.GetKind(), ".succeeded") || strings.HasSuffix(ev.GetKind(), ".failed")):
			// An accepted result (its consequences, e.g. a retry, are
			// recorded with the same actor).
			results[k] = append(results[k], ev.GetKind())
		case strings.HasPrefix(ev.GetActor(), "supervisor/") && ev.GetKind() == "step.expired":
			supervisors[k] = append(supervisors[k], ev.GetActor())
			rep.Recoveries++
		}
		switch ev.GetKind() {
		case "step.succeeded":
			succeeded[ev.GetStep()]++
			succeededOrder = append(succeededOrder, ev.GetStep())
		case "compensation.succeeded":
			compensated[ev.GetStep()]++
			compensatedOrder = append(compensatedOrder, ev.GetStep())
			rep.Compensations++
		case "step.retry_scheduled":
			rep.RetriesScheduled++
		}
	}
	for k, kinds := range results {
		if len(kinds) > 1 {
			rep.add(Violation{Invariant: "no result accepted twice", Task: id, Step: k.step, Attempt: k.attempt, Detail: fmt.Sprintf("results accepted: %v", kinds)})
		}
	}
	for k, actors := range supervisors {
		if len(actors) > 1 {
			rep.add(Violation{Invariant: "one leader acts on an execution", Task: id, Step: k.step, Attempt: k.attempt, Detail: fmt.Sprintf("supervisor actions by %v", actors)})
		}
	}
	for step, n := range succeeded {
		if n > 1 {
			rep.add(Violation{Invariant: "no result accepted twice", Task: id, Step: step, Detail: fmt.Sprintf("step succeeded %d times", n)})
		}
	}
	if t.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED {
		if len(compensated) > 0 && t.GetState() == reevev1.TaskState_TASK_STATE_SUCCEEDED {
			rep.violate("compensated exactly once, in reverse order", id, "a SUCCEEDED task has compensations")
		}
		return
	}
	// Every step that succeeded declares a compensation in the chaos
	// workflow: each is undone exactly once, the last to succeed first.
	want := slices.Clone(succeededOrder)
	slices.Reverse(want)
	for _, step := range succeededOrder {
		if compensated[step] != 1 {
			rep.add(Violation{Invariant: "compensated exactly once, in reverse order", Task: id, Step: step, Detail: fmt.Sprintf("succeeded, compensated %d times", compensated[step])})
		}
	}
	if !slices.Equal(compensatedOrder, want) {
		rep.violate("compensated exactly once, in reverse order", id, fmt.Sprintf("succeeded in order %v, compensated in order %v", succeededOrder, compensatedOrder))
	}
	for _, st := range t.GetSteps() {
		if succeeded[st.GetName()] > 0 && st.GetState() != reevev1.StepState_STEP_STATE_COMPENSATED {
			rep.add(Violation{Invariant: "compensated exactly once, in reverse order", Task: id, Step: st.GetName(), Detail: "succeeded step ended " + st.GetState().String()})
		}
	}
}

// checkSideEffects checks every logged side effect against the tasks: it
// belongs to an existing step, to its current or a superseded attempt, under
// the step's idempotency key; and every accepted success has its side effect.
func checkSideEffects(dir string, tasks map[string]*reevev1.Task, rep *Report) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return err
	}
	type execRef struct {
		task, step string
		attempt    int32
	}
	done := map[execRef]bool{}
	keys := map[string]int{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var e SideEffect
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				rep.SideEffectsTorn++ // a line cut by SIGKILL
				continue
			}
			rep.SideEffects++
			keys[fmt.Sprintf("%s/%d", e.Key, e.Attempt)]++
			done[execRef{e.Task, e.Step, int32(e.Attempt)}] = true
			t := tasks[e.Task]
			var st *reevev1.Step
			if t != nil {
				st = taskstate.FindStep(t, e.Step)
			}
			wantKey := st.GetIdempotencyKey()
			if e.Compensation {
				wantKey += ":compensate"
			}
			v := Violation{Invariant: "side effect attributable", Task: e.Task, Step: e.Step, Attempt: int32(e.Attempt)}
			switch {
			case t == nil:
				v.Detail = "side effect of a task not in etcd (by " + e.Agent + ")"
			case st == nil:
				v.Detail = "side effect of a step not in the task"
			case e.Attempt < 1 || int32(e.Attempt) > st.GetAttempt():
				v.Detail = fmt.Sprintf("attempt %d, but the step is at attempt %d", e.Attempt, st.GetAttempt())
			case e.Key != wantKey:
				v.Detail = fmt.Sprintf("idempotency key %q, want %q", e.Key, wantKey)
			case e.Compensation && !st.GetCompensation():
				v.Detail = "compensation side effect of a step never compensated"
			default:
				continue
			}
			rep.add(v)
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			return fmt.Errorf("chaos: read %s: %w", f, err)
		}
	}
	for _, n := range keys {
		if n > 1 {
			rep.SideEffectsRepeated += n - 1
		}
	}
	for _, t := range tasks {
		for _, ev := range t.GetHistory() {
			if (ev.GetKind() == "step.succeeded" || ev.GetKind() == "compensation.succeeded") && !done[execRef{t.GetId(), ev.GetStep(), ev.GetAttempt()}] {
				rep.add(Violation{Invariant: "side effect attributable", Task: t.GetId(), Step: ev.GetStep(), Attempt: ev.GetAttempt(),
					Detail: "result accepted for an execution that logged no side effect"})
			}
		}
	}
	return nil
}

// verifyStore adds every store invariant violation `reeve verify` finds
// (orphan or disagreeing index keys, terminal tasks with live keys, tasks
// nothing will move) as a violation of invariant "store: <kind>".
func verifyStore(ctx context.Context, cli *clientv3.Client, rep *Report) error {
	vr, err := verify.Check(ctx, cli, verify.Options{})
	if err != nil {
		return err
	}
	for _, v := range vr.Violations {
		rep.add(Violation{Invariant: "store: " + v.Kind, Task: v.TaskID, Detail: v.Key + ": " + v.Detail})
	}
	return nil
}
