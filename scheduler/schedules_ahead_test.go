package scheduler_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/schedule"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// Firing ahead (docs/schedules.md): a schedule is due DefaultScheduleFireAhead
// before its time; the firing submits the time's task with the time as its
// start time, so it exists, waiting to start, and starts at the time.

const ahead = scheduler.DefaultScheduleFireAhead

func (e *schedEnv) task(t *testing.T, id string) *reevev1.Task {
	t.Helper()
	resp, err := e.c.GetTask(testCtx(t), &reevev1.GetTaskRequest{TaskId: id})
	if err != nil {
		t.Fatalf("get task %s: %v", id, err)
	}
	return resp.GetTask()
}

// startDue starts task id whose start time came through sup, as the
// supervisor leader's timer does (RecoverSteps with the task's @start key).
func (e *schedEnv) startDue(t *testing.T, sup reevev1.SupervisorServiceClient, id string) {
	t.Helper()
	resp, err := sup.RecoverSteps(testCtx(t), &reevev1.RecoverStepsRequest{Fence: e.fence, Decisions: []*reevev1.RecoveryDecision{{
		TaskId: id, Step: taskstate.StartMark, Action: reevev1.RecoveryAction_RECOVERY_ACTION_RETRY, Reason: "start time reached"}}})
	if err != nil || !resp.GetOutcomes()[0].GetApplied() {
		t.Fatalf("start %s: %v %v", id, err, resp.GetOutcomes())
	}
}

// waitStarted waits until task id no longer waits to start (the scheduler
// that fired it ahead starts it at its time) and returns it.
func (e *schedEnv) waitStarted(t *testing.T, id string) *reevev1.Task {
	t.Helper()
	for deadline := time.Now().Add(wait); ; {
		task := e.task(t, id)
		if _, waits := taskstate.AwaitingStart(task); !waits {
			return task
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still waits to start at %v (its start time %v)", id, e.clock.Now(), task.GetStartTime().AsTime())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startKeyTime returns the time of the @start key of task id in the
// deadline index (zero when it has none).
func (e *schedEnv) startKeyTime(t *testing.T, id string) time.Time {
	t.Helper()
	resp, err := e.env.Etcd.Client().Get(testCtx(t), "/reeve/deadlines/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		parts := strings.Split(strings.TrimPrefix(string(kv.Key), "/reeve/deadlines/"), "/")
		if len(parts) == 5 && parts[2] == id && parts[3] == taskstate.StartMark {
			ns, err := strconv.ParseInt(parts[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return time.Unix(0, ns)
		}
	}
	return time.Time{}
}

func TestScheduleFiresAheadAsADelayedStart(t *testing.T) {
	e := newSchedEnv(t)
	t0 := e.clock.Now()
	t1 := t0.Add(time.Minute)
	sc := e.create(t, everyMinute("s", reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_ALLOW_ALL))
	if next := sc.GetInfo().GetNextFireTime().AsTime(); !next.Equal(t1.Add(-ahead)) {
		t.Fatalf("due %v, want %v (the time less the fire-ahead)", next, t1.Add(-ahead))
	}

	// Just before the fire-ahead window nothing is due.
	e.clock.Advance(time.Minute - ahead - time.Second)
	if o := e.fire(t, "s"); o.GetStarted() != 0 {
		t.Fatalf("%v before the window: started %d", e.clock.Now().Sub(t1), o.GetStarted())
	}
	e.clock.Advance(time.Second)
	if o := e.fire(t, "s"); o.GetStarted() != 1 {
		t.Fatalf("fired ahead: started %d, want 1", o.GetStarted())
	}
	id := schedule.TaskID("s", t1)
	task := e.task(t, id)
	if at, waits := taskstate.AwaitingStart(task); !waits || !at.Equal(t1) {
		t.Fatalf("task %s: state %v, start time %v, want waiting to start at %v", id, task.GetState(), task.GetStartTime().AsTime(), t1)
	}
	got := e.get(t, "s")
	if run := got.GetInfo().GetRecentRuns()[0]; run.GetTaskId() != id || !run.GetStartTime().AsTime().Equal(t1) {
		t.Fatalf("recent run %v, want task %s starting at %v", run, id, t1)
	}
	if next := got.GetInfo().GetNextFireTime().AsTime(); !next.Equal(t1.Add(time.Minute - ahead)) {
		t.Fatalf("due %v, want the next time less the fire-ahead %v", next, t1.Add(time.Minute-ahead))
	}
	// A firing again within the window starts nothing more.
	if o := e.fire(t, "s"); o.GetStarted() != 0 {
		t.Fatalf("fired again: started %d", o.GetStarted())
	}

	// The supervisor's timer is its backstop only: its key is later.
	if at := e.startKeyTime(t, id); !at.Equal(t1.Add(scheduler.StartBackstop)) {
		t.Fatalf("@start key at %v, want the start time plus the backstop %v", at, t1.Add(scheduler.StartBackstop))
	}
	// At its time the scheduler that fired it starts it; not before.
	e.clock.Advance(ahead - time.Millisecond)
	if _, waits := taskstate.AwaitingStart(e.task(t, id)); !waits {
		t.Fatal("started before its time")
	}
	e.clock.Advance(time.Millisecond)
	task = e.waitStarted(t, id)
	if _, waits := taskstate.AwaitingStart(task); waits || task.GetSteps()[0].GetReadyTime().AsTime().Before(t1) {
		t.Fatalf("after its start: state %v, step ready at %v, want started at %v", task.GetState(), task.GetSteps()[0].GetReadyTime().AsTime(), t1)
	}
	if task.GetCreateTime().AsTime().After(t1.Add(-ahead)) {
		t.Fatalf("created %v, want fired ahead of %v", task.GetCreateTime().AsTime(), t1)
	}
}

// Under an overlap policy that looks at the running task, a time is fired
// ahead only when no run is active: else the policy decides at the time.
func TestScheduleFiresAtTheTimeWhileARunIsActive(t *testing.T) {
	e := newSchedEnv(t)
	t0 := e.clock.Now()
	t1, t2 := t0.Add(time.Minute), t0.Add(2*time.Minute)
	e.create(t, everyMinute("s", reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_SKIP))
	e.clock.Advance(time.Minute - ahead)
	if o := e.fire(t, "s"); o.GetStarted() != 1 {
		t.Fatalf("t1 fired ahead: started %d, want 1", o.GetStarted())
	}

	// t2 comes within the window while t1's task is active: not fired yet.
	e.clock.Advance(time.Minute)
	if o := e.fire(t, "s"); o.GetStarted() != 0 || o.GetSkipped() != 0 {
		t.Fatalf("t2 ahead with t1 active: started %d skipped %d, want neither", o.GetStarted(), o.GetSkipped())
	}
	got := e.get(t, "s")
	if next := got.GetInfo().GetNextFireTime().AsTime(); !next.Equal(t2) {
		t.Fatalf("due %v, want t2 itself %v", next, t2)
	}
	if until := got.GetInfo().GetHandledUntil().AsTime(); !until.Before(t2) {
		t.Fatalf("handled until %v, want before t2", until)
	}

	// t1's task ends before t2: at t2 the time runs, starting at once.
	e.cancel(t, schedule.TaskID("s", t1))
	e.clock.Advance(ahead)
	if o := e.fire(t, "s"); o.GetStarted() != 1 {
		t.Fatalf("t2 at its time: started %d, want 1", o.GetStarted())
	}
	if _, waits := taskstate.AwaitingStart(e.task(t, schedule.TaskID("s", t2))); waits {
		t.Fatal("t2's task waits to start, want started at its time")
	}

	// And when t2's task is still running at t3, t3 is skipped at t3.
	e.clock.Advance(time.Minute - ahead)
	e.fire(t, "s")
	e.clock.Advance(ahead)
	if o := e.fire(t, "s"); o.GetStarted() != 0 || o.GetSkipped() != 1 {
		t.Fatalf("t3 while t2 runs: started %d skipped %d, want 0 and 1", o.GetStarted(), o.GetSkipped())
	}
}

// A pause or a delete within the window cancels the run fired ahead before
// it starts; a resume does not run that time again. A run that started is
// left running.
func TestSchedulePauseAndDeleteCancelARunFiredAhead(t *testing.T) {
	e := newSchedEnv(t)
	t0 := e.clock.Now()
	t1, t2 := t0.Add(time.Minute), t0.Add(2*time.Minute)
	for _, name := range []string{"paused", "deleted", "started"} {
		e.create(t, everyMinute(name, reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_ALLOW_ALL))
	}
	e.clock.Advance(time.Minute - ahead)
	for _, name := range []string{"paused", "deleted", "started"} {
		if o := e.fire(t, name); o.GetStarted() != 1 {
			t.Fatalf("%s: started %d, want 1", name, o.GetStarted())
		}
	}

	ctx := testCtx(t)
	if _, err := e.sc.PauseSchedule(ctx, &reevev1.PauseScheduleRequest{Name: "paused", Note: "maintenance"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sc.DeleteSchedule(ctx, &reevev1.DeleteScheduleRequest{Name: "deleted"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"paused", "deleted"} {
		if st := e.task(t, schedule.TaskID(name, t1)).GetState(); st != reevev1.TaskState_TASK_STATE_CANCELED {
			t.Fatalf("%s: the run fired ahead is %v, want CANCELED", name, st)
		}
	}

	// Resumed after its time, the paused schedule does not run t1 again;
	// it runs t2.
	e.clock.Advance(ahead)
	if _, err := e.sc.ResumeSchedule(ctx, &reevev1.ResumeScheduleRequest{Name: "paused"}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute - ahead)
	if o := e.fire(t, "paused"); o.GetStarted() != 1 {
		t.Fatalf("resumed: started %d, want t2 only", o.GetStarted())
	}
	if ids, want := e.taskIDs(t, "sched-paused-"), idsAt("paused", t1, t2); !slices.Equal(ids, want) {
		t.Fatalf("tasks %v, want %v", ids, want)
	}

	// A run that started is not canceled by a pause.
	e.waitStarted(t, schedule.TaskID("started", t1))
	if _, err := e.sc.PauseSchedule(ctx, &reevev1.PauseScheduleRequest{Name: "started"}); err != nil {
		t.Fatal(err)
	}
	if st := e.task(t, schedule.TaskID("started", t1)).GetState(); st == reevev1.TaskState_TASK_STATE_CANCELED {
		t.Fatal("a started run was canceled by the pause")
	}
}

// A scheduler that fired a run ahead and stopped before its time does not
// start it; the supervisor's timer does, start_backstop later, through any
// scheduler.
func TestScheduleRunFiredAheadStartsWhenItsSchedulerStopped(t *testing.T) {
	e := newSchedEnv(t)
	other := e.env.StartScheduler("", scheduler.WithClock(e.clock))
	t1 := e.clock.Now().Add(time.Minute)
	e.create(t, everyMinute("s", reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_ALLOW_ALL))
	e.clock.Advance(time.Minute - ahead)
	if o := e.fire(t, "s"); o.GetStarted() != 1 {
		t.Fatalf("started %d, want 1", o.GetStarted())
	}
	e.srv.Stop()
	e.clock.Advance(ahead)
	id := schedule.TaskID("s", t1)
	c := other.Client(t)
	resp, err := c.GetTask(testCtx(t), &reevev1.GetTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, waits := taskstate.AwaitingStart(resp.GetTask()); !waits {
		t.Fatal("started at its time with the scheduler that fired it stopped")
	}
	if at := e.startKeyTime(t, id); !at.Equal(t1.Add(scheduler.StartBackstop)) {
		t.Fatalf("@start key at %v, want %v", at, t1.Add(scheduler.StartBackstop))
	}
	e.clock.Advance(scheduler.StartBackstop)
	e.startDue(t, reevev1.NewSupervisorServiceClient(testenv.Dial(t, other.Addr)), id)
	resp, err = c.GetTask(testCtx(t), &reevev1.GetTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, waits := taskstate.AwaitingStart(resp.GetTask()); waits {
		t.Fatal("the backstop did not start it")
	}
}

// With firing ahead off (0) every time fires at its time, as before.
func TestScheduleFireAheadOff(t *testing.T) {
	e := newSchedEnv(t, scheduler.WithScheduleFireAhead(0))
	t1 := e.clock.Now().Add(time.Minute)
	sc := e.create(t, everyMinute("s", reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_ALLOW_ALL))
	if next := sc.GetInfo().GetNextFireTime().AsTime(); !next.Equal(t1) {
		t.Fatalf("due %v, want the time %v", next, t1)
	}
	e.clock.Advance(time.Minute - time.Second)
	if o := e.fire(t, "s"); o.GetStarted() != 0 {
		t.Fatalf("a second early: started %d", o.GetStarted())
	}
	e.clock.Advance(time.Second)
	if o := e.fire(t, "s"); o.GetStarted() != 1 {
		t.Fatalf("at the time: started %d", o.GetStarted())
	}
}

// states returns the state of each task of schedule name, by id.
func (e *schedEnv) states(t *testing.T, name string) map[string]reevev1.TaskState {
	t.Helper()
	out := map[string]reevev1.TaskState{}
	for _, id := range e.taskIDs(t, "sched-"+name+"-") {
		out[id] = e.task(t, id).GetState()
	}
	return out
}

// A firing may fire ahead more times than the schedule keeps as recent
// runs (a fire-ahead of 30 s, a time every second): none of them is
// canceled for it, and a pause cancels every one that has not started.
func TestScheduleFiresAheadMoreTimesThanRecentRuns(t *testing.T) {
	const fireAhead = 30 * time.Second
	e := newSchedEnv(t, scheduler.WithScheduleFireAhead(fireAhead))
	sc := everyMinute("s", reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_ALLOW_ALL)
	sc.Spec.Every = durationpb.New(time.Second)
	e.create(t, sc)
	if o := e.fire(t, "s"); o.GetStarted() != 30 {
		t.Fatalf("fired ahead: started %d, want the 30 times within %v", o.GetStarted(), fireAhead)
	}
	states := e.states(t, "s")
	if len(states) != 30 {
		t.Fatalf("%d tasks, want 30", len(states))
	}
	for id, st := range states {
		if st != reevev1.TaskState_TASK_STATE_PENDING {
			t.Fatalf("task %s is %v, want PENDING, waiting for its time", id, st)
		}
	}

	if _, err := e.sc.PauseSchedule(testCtx(t), &reevev1.PauseScheduleRequest{Name: "s"}); err != nil {
		t.Fatal(err)
	}
	for id, st := range e.states(t, "s") {
		if st != reevev1.TaskState_TASK_STATE_CANCELED {
			t.Fatalf("after the pause, task %s is %v, want CANCELED before its start", id, st)
		}
	}
}

// A run fired ahead whose time passed but that has not started yet (the
// scheduler that fired it stopped and the supervisor's backstop has not
// come, or the scheduler that took the pause has a clock ahead of the one
// that starts it) is canceled by a pause or a delete as well: a paused or
// deleted schedule starts nothing.
func TestSchedulePauseCancelsARunFiredAheadPastItsTimeNotStarted(t *testing.T) {
	e := newSchedEnv(t)
	other := e.env.StartScheduler("", scheduler.WithClock(e.clock))
	t1 := e.clock.Now().Add(time.Minute)
	for _, name := range []string{"paused", "deleted"} {
		e.create(t, everyMinute(name, reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_SKIP))
	}
	e.clock.Advance(time.Minute - ahead)
	for _, name := range []string{"paused", "deleted"} {
		if o := e.fire(t, name); o.GetStarted() != 1 {
			t.Fatalf("%s: started %d, want 1", name, o.GetStarted())
		}
	}
	e.srv.Stop()                         // the scheduler that fired them does not start them
	e.clock.Advance(ahead + time.Second) // nor has the backstop yet
	ctx := testCtx(t)
	sc, c := reevev1.NewScheduleServiceClient(testenv.Dial(t, other.Addr)), other.Client(t)
	if _, err := sc.PauseSchedule(ctx, &reevev1.PauseScheduleRequest{Name: "paused"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.DeleteSchedule(ctx, &reevev1.DeleteScheduleRequest{Name: "deleted"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"paused", "deleted"} {
		resp, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: schedule.TaskID(name, t1)})
		if err != nil {
			t.Fatal(err)
		}
		if st := resp.GetTask().GetState(); st != reevev1.TaskState_TASK_STATE_CANCELED {
			t.Fatalf("%s: the run fired ahead, not started, is %v, want CANCELED", name, st)
		}
	}
}

// Two firers fire a schedule at once: the one whose write comes second
// runs again on the record the first wrote, which ran the times it fired
// ahead; it cancels none of them, also when they are more than the recent
// runs keep.
func TestScheduleSecondFirerCancelsNoRunFiredAhead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		every   time.Duration
		overlap reevev1.ScheduleOverlapPolicy
		fired   int32
	}{
		{"skip", time.Minute, reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_SKIP, 1},
		{"allow_all, more than the recent runs", time.Second, reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_ALLOW_ALL, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSchedEnv(t, scheduler.WithScheduleFireAhead(30*time.Second))
			sc := everyMinute("s", tc.overlap)
			sc.Spec.Every = durationpb.New(tc.every)
			e.create(t, sc)
			e.clock.Advance(max(tc.every-30*time.Second, 0)) // to the first time's fire-ahead
			ctx := testCtx(t)
			cur, rev, err := e.srv.ScheduleRecordForTest(ctx, "default", "s")
			if err != nil {
				t.Fatal(err)
			}
			if o := e.fire(t, "s"); o.GetStarted() != tc.fired {
				t.Fatalf("first firer: started %d, want %d", o.GetStarted(), tc.fired)
			}
			if _, err := e.srv.FireScheduleAsOfForTest(ctx, "default", "s", rev, cur, e.fence); err != nil {
				t.Fatalf("second firer: %v", err)
			}
			states := e.states(t, "s")
			if len(states) != int(tc.fired) {
				t.Fatalf("%d tasks, want %d", len(states), tc.fired)
			}
			for id, st := range states {
				if st != reevev1.TaskState_TASK_STATE_PENDING {
					t.Fatalf("task %s is %v, want PENDING, waiting for its time", id, st)
				}
			}
		})
	}
}
