package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/chaos/workload"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/verify"
)

// layout names the keys the checker and the sampler read: the chaos
// cluster's store runs with the default prefix.
var layout = store.NewLayout(store.DefaultPrefix)

// check reads every task and the side-effect logs and records violations
// and counts in rep. The wide tasks' histories come from pager when they
// outgrew their records. It returns an error only if it cannot read.
func check(ctx context.Context, cli *clientv3.Client, tasksRd *taskread.Reader, cfg Config, plan []plannedTask, pager *historyPager, waits *waitLog, rep *Report) error {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := cli.Get(rctx, layout.Tasks("default"), clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("chaos: read tasks: %w", err)
	}
	tasks := map[string]*reevev1.Task{}
	for _, kv := range resp.Kvs {
		var rec storev1.TaskRecord
		if err := store.UnmarshalRecord(kv.Value, &rec); err != nil {
			return fmt.Errorf("chaos: task %s: %w", kv.Key, err)
		}
		tasks[rec.GetTask().GetId()] = rec.GetTask()
	}
	// Tasks that moved to the archive: read after etcd, as a task is
	// archived before it leaves etcd.
	if tasksRd.HasArchive() {
		for _, pt := range plan {
			if pt.ID == "" || tasks[pt.ID] != nil {
				continue
			}
			rec, err := tasksRd.Archived(rctx, "default", pt.ID)
			if errors.Is(err, taskread.ErrNotArchived) {
				continue
			}
			if err != nil {
				return fmt.Errorf("chaos: read the archive: %w", err)
			}
			tasks[pt.ID] = rec.GetTask()
			rep.Archived++
		}
	}
	alerted, err := alertedTasks(rctx, cli)
	if err != nil {
		return err
	}
	rep.States, rep.WideStates, rep.Waits.States = map[string]int{}, map[string]int{}, map[string]int{}
	for _, pt := range plan {
		t := tasks[pt.ID]
		if t == nil {
			if pt.ID != "" {
				rep.violate("every task terminal", pt.ID, "task missing from etcd and the archive")
			}
			continue
		}
		state := strings.TrimPrefix(t.GetState().String(), "TASK_STATE_")
		rep.States[state]++
		if !taskstate.TerminalTask(t.GetState()) {
			rep.violate("every task terminal", pt.ID, "task is "+t.GetState().String())
		}
		if pt.Workflow == workload.WorkflowWide {
			rep.WideTasks++
			rep.WideStates[state]++
			if t.GetHistoryDropped() > 0 {
				full, why := pager.full(t)
				if why != "" {
					rep.violate("history complete", pt.ID, why)
				} else {
					rep.WideHistoryPaged++
					t = full
					tasks[pt.ID] = full
				}
			}
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
		switch {
		case pt.OperatorRetry:
			checkRetried(t, pt, rep)
		case pt.Input.FailStep != "":
			rep.DesignedToFail++
			if t.GetState() == reevev1.TaskState_TASK_STATE_SUCCEEDED {
				rep.violate("designed failure not ignored", pt.ID, "step "+pt.Input.FailStep+" always fails for good, yet the task SUCCEEDED")
			}
		case pt.Workflow == workload.WorkflowWait:
			// Compensated by design as often as by faults: counted apart.
			rep.Waits.Tasks++
			rep.Waits.States[state]++
		case t.GetState() == reevev1.TaskState_TASK_STATE_COMPENSATED && pt.CompensateAfter == 0:
			rep.CompensatedByFaults++
		}
		if slices.ContainsFunc(t.GetHistory(), func(ev *reevev1.HistoryEvent) bool { return ev.GetKind() == "task.failed" }) {
			if alerted[pt.ID] {
				rep.FailedWithAlert++
			} else {
				rep.violate("a failed task raises an alert", pt.ID, "the task was FAILED, and no alert names it")
			}
		}
		checkHistory(t, rep)
		checkTimers(t, rep)
	}
	if waits != nil {
		checkApplied(tasks, waits, rep)
	}
	return checkSideEffects(cfg.sideEffectDir(), tasks, rep)
}

// alertedTasks returns the ids of the tasks an alert names.
func alertedTasks(ctx context.Context, cli *clientv3.Client) (map[string]bool, error) {
	resp, err := cli.Get(ctx, layout.Alerts("default"), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("chaos: read alerts: %w", err)
	}
	out := map[string]bool{}
	for _, kv := range resp.Kvs {
		var a reevev1.Alert
		if err := proto.Unmarshal(kv.Value, &a); err != nil {
			return nil, fmt.Errorf("chaos: alert %s: %w", kv.Key, err)
		}
		out[a.GetTaskId()] = true
	}
	return out, nil
}

// checkRetried checks a task of the operator retry share: retried (an
// accepted RetryStep) it ended SUCCEEDED; not retried it can only have
// succeeded in its first round; and its fail step never succeeded at an
// attempt the agent fails.
func checkRetried(t *reevev1.Task, pt plannedTask, rep *Report) {
	rep.RetryTasks++
	retried := 0
	for _, ev := range t.GetHistory() {
		switch {
		case ev.GetKind() == "step.retried_by_operator":
			retried++
		case ev.GetKind() == "step.succeeded" && ev.GetStep() == pt.Input.FailStep && int(ev.GetAttempt()) <= pt.Input.FailUntilAttempt:
			rep.add(Violation{Invariant: "designed failure not ignored", Task: t.GetId(), Step: ev.GetStep(), Attempt: ev.GetAttempt(),
				Detail: fmt.Sprintf("succeeded at attempt %d; the agent fails every attempt up to %d", ev.GetAttempt(), pt.Input.FailUntilAttempt)})
		}
	}
	succeeded := t.GetState() == reevev1.TaskState_TASK_STATE_SUCCEEDED
	switch {
	case retried > 0 && succeeded:
		rep.TasksRetried++
		rep.RetriedSucceeded++
	case retried > 0:
		rep.TasksRetried++
		rep.violate("a retried task ends SUCCEEDED", t.GetId(), fmt.Sprintf("retried %d times, ended %s", retried, t.GetState()))
	case succeeded:
		rep.RetryNotNeeded++
	default:
		rep.violate("a retried task ends SUCCEEDED", t.GetId(), fmt.Sprintf("ended %s and was never retried", t.GetState()))
	}
}

type execKey struct {
	step    string
	attempt int32
}

// checkHistory checks one task's history: results accepted at most once,
// supervisor actions by one leader per execution, an operator retry only of
// a FAILED task at rest, nothing undone that never succeeded, and for a
// COMPENSATED task every succeeded step that has a compensation compensated
// exactly once, downstream steps before their upstream ones.
func checkHistory(t *reevev1.Task, rep *Report) {
	id := t.GetId()
	if t.GetHistoryDropped() > 0 {
		rep.violate("history complete", id, fmt.Sprintf("%d history events dropped: cannot verify", t.GetHistoryDropped()))
	}
	results := map[execKey][]string{}
	supervisors := map[execKey][]string{}
	succeeded := map[string]int{}
	compensated := map[string]int{}
	undoneAt := map[string]int{} // step → index of its compensation.succeeded
	// The task's last task-level event and whether any execution was
	// dispatched since: an operator retry needs the task FAILED, at rest.
	lastTaskEvent, dispatchedSince := "", false
	// Paused: from a task.paused event to the task.resumed, or the
	// compensation or end that clears the pause.
	paused := false
	for i, ev := range t.GetHistory() {
		switch ev.GetKind() {
		case "task.paused":
			paused = true
			rep.Pauses++
			if strings.HasPrefix(ev.GetMessage(), "batch ") {
				rep.BatchPauses++
			}
		case "task.resumed", "task.compensating", "task.succeeded", "task.failed", "task.canceled", "task.compensated":
			paused = false
		case "step.dispatched", "compensation.dispatched":
			if paused {
				rep.add(Violation{Invariant: "nothing dispatched while paused", Task: id, Step: ev.GetStep(), Attempt: ev.GetAttempt(), Detail: ev.GetKind() + " after task.paused"})
			}
		}
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
		case "compensation.succeeded":
			if succeeded[ev.GetStep()] == 0 {
				rep.add(Violation{Invariant: "nothing undone that never succeeded", Task: id, Step: ev.GetStep(), Attempt: ev.GetAttempt(), Detail: "compensated before any success of the step"})
			}
			compensated[ev.GetStep()]++
			undoneAt[ev.GetStep()] = i
			rep.Compensations++
		case "step.retry_scheduled":
			rep.RetriesScheduled++
		case "step.dispatched", "compensation.dispatched":
			dispatchedSince = true
		case "step.retried_by_operator":
			if lastTaskEvent != "task.failed" || dispatchedSince {
				detail := fmt.Sprintf("the task was not FAILED: its last task-level event before was %q", lastTaskEvent)
				if lastTaskEvent == "task.failed" {
					detail = "executions were dispatched between the task's failure and the retry"
				}
				rep.add(Violation{Invariant: "operator retry only of a FAILED task", Task: id, Step: ev.GetStep(), Attempt: ev.GetAttempt(), Detail: detail})
			}
			lastTaskEvent, dispatchedSince = "operator retry", false
		}
		if ev.GetStep() == "" && strings.HasPrefix(ev.GetKind(), "task.") {
			lastTaskEvent, dispatchedSince = ev.GetKind(), false
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
	const inv = "compensated exactly once, in reverse order"
	for _, st := range t.GetSteps() {
		name := st.GetName()
		undoable := taskstate.Spec(t, name).GetCompensation() != nil
		switch {
		case !undoable && compensated[name] > 0:
			rep.add(Violation{Invariant: inv, Task: id, Step: name, Detail: fmt.Sprintf("the step has no compensation, yet was compensated %d times", compensated[name])})
		case undoable && succeeded[name] > 0 && compensated[name] != 1:
			rep.add(Violation{Invariant: inv, Task: id, Step: name, Detail: fmt.Sprintf("succeeded, compensated %d times", compensated[name])})
		case undoable && succeeded[name] > 0 && st.GetState() != reevev1.StepState_STEP_STATE_COMPENSATED:
			rep.add(Violation{Invariant: inv, Task: id, Step: name, Detail: "succeeded step ended " + st.GetState().String()})
		}
		// Undone only after every undone step downstream of it.
		at, ok := undoneAt[name]
		if !ok {
			continue
		}
		for _, up := range taskstate.Upstream(t, name) {
			if upAt, ok := undoneAt[up]; ok && upAt < at {
				rep.add(Violation{Invariant: inv, Task: id, Step: up, Detail: fmt.Sprintf("compensated before %q, which depends on it", name)})
			}
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
	forward := map[execRef]int{} // forward executions logged
	keys := map[string]int{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var e workload.SideEffect
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				rep.SideEffectsTorn++ // a line cut by SIGKILL
				continue
			}
			rep.SideEffects++
			keys[fmt.Sprintf("%s/%d", e.Key, e.Attempt)]++
			done[execRef{e.Task, e.Step, int32(e.Attempt)}] = true
			if !e.Compensation {
				forward[execRef{e.Task, e.Step, int32(e.Attempt)}]++
			}
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
			ref := execRef{t.GetId(), ev.GetStep(), ev.GetAttempt()}
			// A step completed from outside, or a sleep that ended, ran on
			// no agent: it has no side effect to log.
			external := outsideActor(ev.GetActor()) || taskstate.Sleeping(t, &reevev1.Step{Name: ev.GetStep(), State: reevev1.StepState_STEP_STATE_WAITING})
			if (ev.GetKind() == "step.succeeded" || ev.GetKind() == "compensation.succeeded") && !done[ref] && !external {
				rep.add(Violation{Invariant: "side effect attributable", Task: t.GetId(), Step: ev.GetStep(), Attempt: ev.GetAttempt(),
					Detail: "result accepted for an execution that logged no side effect"})
			}
			// An accepted result of a forward execution: the attempt ran once.
			if (ev.GetKind() == "step.succeeded" || ev.GetKind() == "step.failed") && strings.HasPrefix(ev.GetActor(), "agent/") && forward[ref] > 1 {
				rep.add(Violation{Invariant: "forward side effect at most once per accepted attempt", Task: t.GetId(), Step: ev.GetStep(), Attempt: ev.GetAttempt(),
					Detail: fmt.Sprintf("the attempt's result was accepted and its side effect logged %d times", forward[ref])})
			}
		}
	}
	return nil
}

// verifyStore adds every store invariant violation `reeve verify` finds
// (orphan or disagreeing index keys, terminal tasks with live keys, tasks
// nothing will move) as a violation of invariant "store: <kind>".
func verifyStore(ctx context.Context, cli *clientv3.Client, tasks *taskread.Reader, plan []plannedTask, rep *Report) error {
	opts := verify.Options{Tasks: tasks}
	if tasks.HasArchive() {
		// Every task of the plan must be in etcd or the archive, and none
		// may linger in etcd much past its move (grace 2 s; FAILED ones stay
		// for the retention).
		opts.ArchiveGrace, opts.Retention, opts.Slack = 2*time.Second, 72*time.Hour, time.Minute
		for _, pt := range plan {
			if pt.ID != "" {
				opts.Expect = append(opts.Expect, verify.TaskRef{Namespace: "default", ID: pt.ID})
			}
		}
	}
	vr, err := verify.Check(ctx, cli, opts)
	if err != nil {
		return err
	}
	for _, v := range vr.Violations {
		rep.add(Violation{Invariant: "store: " + v.Kind, Task: v.TaskID, Detail: v.Key + ": " + v.Detail})
	}
	return nil
}
