package scheduler_test

import (
	"context"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/schedule"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// schedEnv is a scheduler on a fake clock (at a whole minute) with a
// registered workflow "job" and a fence that holds, so a test fires
// schedules itself (FireSchedules) as the supervisor leader would.
type schedEnv struct {
	env   *testenv.Env
	srv   *testenv.Scheduler
	clock *clockwork.FakeClock
	c     reevev1.SchedulerServiceClient
	sc    reevev1.ScheduleServiceClient
	sup   reevev1.SupervisorServiceClient
	fence *reevev1.Fence
}

func newSchedEnv(t *testing.T, opts ...scheduler.Option) *schedEnv {
	t.Helper()
	env := testenv.New(t)
	clock := clockwork.NewFakeClockAt(time.Now().Truncate(time.Minute))
	s := env.StartScheduler("", append([]scheduler.Option{scheduler.WithClock(clock)}, opts...)...)
	ctx := testCtx(t)
	e := &schedEnv{env: env, srv: s, clock: clock, c: s.Client(t), sc: reevev1.NewScheduleServiceClient(testenv.Dial(t, s.Addr)),
		sup: reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))}
	if _, err := e.c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{Name: "job", Steps: []*reevev1.StepSpec{step("a", "t")}}}); err != nil {
		t.Fatal(err)
	}
	el, err := env.Etcd.Client().Put(ctx, "/reeve/supervisor/election/firer", "sup")
	if err != nil {
		t.Fatal(err)
	}
	e.fence = &reevev1.Fence{ElectionKey: "/reeve/supervisor/election/firer", Revision: el.Header.Revision, SupervisorId: "sup"}
	return e
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func everyMinute(name string, overlap reevev1.ScheduleOverlapPolicy) *reevev1.Schedule {
	return &reevev1.Schedule{Name: name, Spec: &reevev1.ScheduleSpec{Every: durationpb.New(time.Minute)},
		Action:   &reevev1.ScheduleAction{Workflow: &reevev1.WorkflowRef{Name: "job"}},
		Policies: &reevev1.SchedulePolicies{Overlap: overlap}}
}

func (e *schedEnv) create(t *testing.T, sc *reevev1.Schedule) *reevev1.Schedule {
	t.Helper()
	resp, err := e.sc.CreateSchedule(testCtx(t), &reevev1.CreateScheduleRequest{Schedule: sc})
	if err != nil {
		t.Fatalf("create schedule: %v", err)
	}
	return resp.GetSchedule()
}

func (e *schedEnv) get(t *testing.T, name string) *reevev1.Schedule {
	t.Helper()
	resp, err := e.sc.GetSchedule(testCtx(t), &reevev1.GetScheduleRequest{Name: name})
	if err != nil {
		t.Fatalf("get schedule: %v", err)
	}
	return resp.GetSchedule()
}

// fire fires schedule name at the clock's now, as the leader would.
func (e *schedEnv) fire(t *testing.T, name string) *reevev1.FireOutcome {
	t.Helper()
	resp, err := e.sup.FireSchedules(testCtx(t), &reevev1.FireSchedulesRequest{Fence: e.fence, Schedules: []*reevev1.ScheduleRef{{Name: name}}})
	if err != nil {
		t.Fatalf("fire: %v", err)
	}
	o := resp.GetOutcomes()[0]
	if !o.GetApplied() {
		t.Fatalf("fire not applied: %v", o.GetStatus())
	}
	return o
}

// taskIDs returns the ids of the tasks whose ids start with prefix.
func (e *schedEnv) taskIDs(t *testing.T, prefix string) []string {
	t.Helper()
	resp, err := e.c.ListTasks(testCtx(t), &reevev1.ListTasksRequest{TaskIdPrefix: prefix, PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tk := range resp.GetTasks() {
		ids = append(ids, tk.GetId())
	}
	slices.Sort(ids)
	return ids
}

func (e *schedEnv) cancel(t *testing.T, id string) {
	t.Helper()
	if _, err := e.c.CancelTask(testCtx(t), &reevev1.CancelTaskRequest{TaskId: id}); err != nil {
		t.Fatal(err)
	}
}

func idsAt(name string, ts ...time.Time) []string {
	var ids []string
	for _, t := range ts {
		ids = append(ids, schedule.TaskID(name, t))
	}
	slices.Sort(ids)
	return ids
}

func TestScheduleLifecycle(t *testing.T) {
	e := newSchedEnv(t)
	ctx := testCtx(t)
	sc := everyMinute("nightly", 0)
	sc.Spec = &reevev1.ScheduleSpec{Cron: "0 2 * * *", TimeZone: "Europe/Berlin"}
	created := e.create(t, sc)
	berlin, _ := time.LoadLocation("Europe/Berlin")
	if n := len(created.GetInfo().GetNextTimes()); n != 5 {
		t.Fatalf("%d next times, want 5", n)
	}
	for _, nt := range created.GetInfo().GetNextTimes() {
		if wall := nt.AsTime().In(berlin); wall.Hour() != 2 || wall.Minute() != 0 {
			t.Fatalf("next time %v is not 02:00 in Berlin", wall)
		}
	}
	if _, err := e.sc.CreateSchedule(ctx, &reevev1.CreateScheduleRequest{Schedule: sc}); status.Code(err) != codes.AlreadyExists || reasonOf(status.Convert(err)) != scheduler.ReasonScheduleAlreadyExists {
		t.Fatalf("second create: %v, want ALREADY_EXISTS (%s)", err, scheduler.ReasonScheduleAlreadyExists)
	}

	p, err := e.sc.PauseSchedule(ctx, &reevev1.PauseScheduleRequest{Name: "nightly", Note: "bank holiday"})
	if err != nil || !p.GetSchedule().GetPaused() || p.GetSchedule().GetNote() != "bank holiday" || len(p.GetSchedule().GetInfo().GetNextTimes()) != 0 {
		t.Fatalf("pause: %v %v", p, err)
	}
	if got := e.get(t, "nightly"); !got.GetPaused() || got.GetInfo().GetNextFireTime() != nil {
		t.Fatalf("paused schedule still due at %v", got.GetInfo().GetNextFireTime())
	}
	if r, err := e.sc.ResumeSchedule(ctx, &reevev1.ResumeScheduleRequest{Name: "nightly"}); err != nil || r.GetSchedule().GetPaused() || len(r.GetSchedule().GetInfo().GetNextTimes()) != 5 {
		t.Fatalf("resume: %v %v", r, err)
	}

	sc.Spec = &reevev1.ScheduleSpec{Every: durationpb.New(time.Hour), Offset: durationpb.New(15 * time.Minute)}
	u, err := e.sc.UpdateSchedule(ctx, &reevev1.UpdateScheduleRequest{Schedule: sc})
	if err != nil {
		t.Fatal(err)
	}
	if next := u.GetSchedule().GetInfo().GetNextTimes()[0].AsTime(); next.Minute() != 15 || next.Sub(e.clock.Now()) > time.Hour {
		t.Fatalf("after the update the next time is %v, want the next :15", next)
	}

	list, err := e.sc.ListSchedules(ctx, &reevev1.ListSchedulesRequest{})
	if err != nil || len(list.GetSchedules()) != 1 || list.GetSchedules()[0].GetName() != "nightly" {
		t.Fatalf("list: %v %v", list, err)
	}
	if _, err := e.sc.DeleteSchedule(ctx, &reevev1.DeleteScheduleRequest{Name: "nightly"}); err != nil {
		t.Fatal(err)
	}
	_, err = e.sc.GetSchedule(ctx, &reevev1.GetScheduleRequest{Name: "nightly"})
	if st := status.Convert(err); st.Code() != codes.NotFound || reasonOf(st) != scheduler.ReasonScheduleNotFound {
		t.Fatalf("get after delete: %v, want NOT_FOUND (%s)", err, scheduler.ReasonScheduleNotFound)
	}
}

// A bad schedule is refused INVALID_ARGUMENT naming its field, and
// nothing is written.
func TestScheduleValidationNamesTheField(t *testing.T) {
	e := newSchedEnv(t)
	before := testenv.DataKeys(t, e.env.Etcd.Client())
	with := func(f func(*reevev1.Schedule)) *reevev1.Schedule {
		sc := everyMinute("s", 0)
		f(sc)
		return sc
	}
	for _, tc := range []struct {
		name  string
		sc    *reevev1.Schedule
		field string
	}{
		{"no schedule", nil, "schedule"},
		{"bad name", with(func(sc *reevev1.Schedule) { sc.Name = "a/b" }), "schedule.name"},
		{"bad namespace", with(func(sc *reevev1.Schedule) { sc.Namespace = "NS" }), "schedule.namespace"},
		{"no spec", with(func(sc *reevev1.Schedule) { sc.Spec = nil }), "schedule.spec"},
		{"bad cron", with(func(sc *reevev1.Schedule) { sc.Spec = &reevev1.ScheduleSpec{Cron: "every day"} }), "schedule.spec.cron"},
		{"cron and every", with(func(sc *reevev1.Schedule) { sc.Spec.Cron = "* * * * *" }), "schedule.spec.cron"},
		{"interval under 1s", with(func(sc *reevev1.Schedule) { sc.Spec.Every = durationpb.New(time.Millisecond) }), "schedule.spec.every"},
		{"offset past the interval", with(func(sc *reevev1.Schedule) { sc.Spec.Offset = durationpb.New(time.Hour) }), "schedule.spec.offset"},
		{"zone", with(func(sc *reevev1.Schedule) { sc.Spec.TimeZone = "Europe/Atlantis" }), "schedule.spec.time_zone"},
		{"end before start", with(func(sc *reevev1.Schedule) {
			sc.Spec.StartTime, sc.Spec.EndTime = timestamppb.New(time.Unix(1e9, 0)), timestamppb.New(time.Unix(1e8, 0))
		}), "schedule.spec.end_time"},
		{"no action", with(func(sc *reevev1.Schedule) { sc.Action = nil }), "schedule.action"},
		{"unregistered workflow", with(func(sc *reevev1.Schedule) { sc.Action.Workflow.Name = "ghost" }), "schedule.action.workflow"},
		{"overlap", with(func(sc *reevev1.Schedule) { sc.Policies.Overlap = 42 }), "schedule.policies.overlap"},
		{"catch-up window", with(func(sc *reevev1.Schedule) { sc.Policies.CatchupWindow = durationpb.New(-time.Second) }), "schedule.policies.catchup_window"},
		{"remaining runs", with(func(sc *reevev1.Schedule) { sc.RemainingRuns = wrapperspb.Int64(-1) }), "schedule.remaining_runs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.sc.CreateSchedule(testCtx(t), &reevev1.CreateScheduleRequest{Schedule: tc.sc})
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || fieldOf(st) != tc.field {
				t.Fatalf("got %v (field %q), want INVALID_ARGUMENT on %s", err, fieldOf(st), tc.field)
			}
		})
	}
	if after := testenv.DataKeys(t, e.env.Etcd.Client()); len(after) != len(before) {
		t.Fatalf("refused creates wrote keys: %d before, %d after", len(before), len(after))
	}
}

// After the firer was down 5 minutes, with a 1-minute catch-up window, the
// times inside the window run once each and the older ones are recorded as
// skipped with why; firing again starts nothing.
func TestScheduleCatchUpAfterTheFirerWasDown(t *testing.T) {
	e := newSchedEnv(t)
	t0 := e.clock.Now()
	e.create(t, everyMinute("s", reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_ALLOW_ALL))
	e.clock.Advance(5 * time.Minute)
	if o := e.fire(t, "s"); o.GetStarted() != 2 || o.GetSkipped() != 3 {
		t.Fatalf("fire after 5 minutes: started %d, skipped %d; want 2 and 3", o.GetStarted(), o.GetSkipped())
	}
	want := idsAt("s", t0.Add(4*time.Minute), t0.Add(5*time.Minute))
	if got := e.taskIDs(t, "sched-s-"); !slices.Equal(got, want) {
		t.Fatalf("tasks %v, want %v", got, want)
	}
	sc := e.get(t, "s")
	skip := sc.GetInfo().GetSkipped()
	if len(skip) != 1 || skip[0].GetCount() != 3 || skip[0].GetReason() != schedule.SkipReasonCatchUp ||
		!skip[0].GetFirstTime().AsTime().Equal(t0.Add(time.Minute)) || !skip[0].GetLastTime().AsTime().Equal(t0.Add(3*time.Minute)) {
		t.Fatalf("skipped %v, want 10:01-10:03 (3) missed", skip)
	}
	if runs := sc.GetInfo().GetRecentRuns(); len(runs) != 2 || runs[0].GetTaskState() != reevev1.TaskState_TASK_STATE_PENDING || runs[1].GetOrigin() != "catch-up" {
		t.Fatalf("recent runs %v", runs)
	}
	if o := e.fire(t, "s"); o.GetStarted() != 0 {
		t.Fatalf("firing again started %d", o.GetStarted())
	}
}

// Each overlap policy with a task that is still running (no agent: it
// stays pending until canceled) when the next time comes.
func TestScheduleOverlapPolicies(t *testing.T) {
	type pol = reevev1.ScheduleOverlapPolicy
	for _, tc := range []struct {
		policy pol
		// after the second time (the first task still running): started,
		// skipped, buffered; then the tasks once the first is canceled and
		// the third time came.
		second  [3]int32
		minutes []int // the minutes whose tasks exist at the end
	}{
		{reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_SKIP, [3]int32{0, 1, 0}, []int{1, 3}},
		{reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_BUFFER_ONE, [3]int32{0, 0, 1}, []int{1, 2}},
		{reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_BUFFER_ALL, [3]int32{0, 0, 1}, []int{1, 2}},
		{reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_CANCEL_OTHER, [3]int32{1, 0, 0}, []int{1, 2, 3}},
		{reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_ALLOW_ALL, [3]int32{1, 0, 0}, []int{1, 2, 3}},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			e := newSchedEnv(t)
			t0 := e.clock.Now()
			e.create(t, everyMinute("s", tc.policy))
			e.clock.Advance(time.Minute)
			if o := e.fire(t, "s"); o.GetStarted() != 1 {
				t.Fatalf("first time: started %d", o.GetStarted())
			}
			e.clock.Advance(time.Minute)
			o := e.fire(t, "s")
			if got := [3]int32{o.GetStarted(), o.GetSkipped(), o.GetBuffered()}; got != tc.second {
				t.Fatalf("second time: started, skipped, buffered %v, want %v", got, tc.second)
			}
			// The first task ends; the third time comes (buffered times
			// go first, so under buffer_one the third is skipped behind
			// the second, and under buffer_all it waits).
			e.cancel(t, schedule.TaskID("s", t0.Add(time.Minute)))
			e.clock.Advance(time.Minute)
			e.fire(t, "s")
			var want []time.Time
			for _, m := range tc.minutes {
				want = append(want, t0.Add(time.Duration(m)*time.Minute))
			}
			if got := e.taskIDs(t, "sched-s-"); !slices.Equal(got, idsAt("s", want...)) {
				t.Fatalf("tasks %v, want %v", got, idsAt("s", want...))
			}
			if tc.policy == reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_CANCEL_OTHER {
				resp, err := e.c.GetTask(testCtx(t), &reevev1.GetTaskRequest{TaskId: schedule.TaskID("s", t0.Add(2*time.Minute))})
				if err != nil || resp.GetTask().GetState() != reevev1.TaskState_TASK_STATE_CANCELED {
					t.Fatalf("cancel_other left the second task %v (%v), want canceled by the third", resp.GetTask().GetState(), err)
				}
			}
		})
	}
}

// A backfill starts the range's times once each: again, it starts none.
func TestScheduleBackfillStartsEachTimeOnce(t *testing.T) {
	e := newSchedEnv(t)
	t0 := e.clock.Now()
	e.create(t, everyMinute("s", reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_ALLOW_ALL))
	req := &reevev1.BackfillScheduleRequest{Name: "s", StartTime: timestamppb.New(t0.Add(-3 * time.Minute)), EndTime: timestamppb.New(t0.Add(-time.Minute))}
	resp, err := e.sc.BackfillSchedule(testCtx(t), req)
	if err != nil || len(resp.GetTaskIds()) != 3 || resp.GetExisting() != 0 {
		t.Fatalf("backfill: %v %v, want 3 new tasks", resp, err)
	}
	req.StartTime = timestamppb.New(t0.Add(-4 * time.Minute))
	resp, err = e.sc.BackfillSchedule(testCtx(t), req)
	if err != nil || len(resp.GetTaskIds()) != 4 || resp.GetExisting() != 3 {
		t.Fatalf("backfill again, one minute wider: %v %v, want 4 tasks of which 3 existed", resp, err)
	}
	want := idsAt("s", t0.Add(-4*time.Minute), t0.Add(-3*time.Minute), t0.Add(-2*time.Minute), t0.Add(-time.Minute))
	if got := e.taskIDs(t, "sched-s-"); !slices.Equal(got, want) {
		t.Fatalf("tasks %v, want %v", got, want)
	}
	req.EndTime = timestamppb.New(t0.Add(time.Hour))
	if _, err := e.sc.BackfillSchedule(testCtx(t), req); fieldOf(status.Convert(err)) != "end_time" {
		t.Fatalf("a backfill into the future: %v, want INVALID_ARGUMENT on end_time", err)
	}
}

// A trigger runs while paused; a paused schedule does not fire.
func TestScheduleTriggerWhilePaused(t *testing.T) {
	e := newSchedEnv(t)
	e.create(t, everyMinute("s", 0))
	if _, err := e.sc.PauseSchedule(testCtx(t), &reevev1.PauseScheduleRequest{Name: "s"}); err != nil {
		t.Fatal(err)
	}
	resp, err := e.sc.TriggerSchedule(testCtx(t), &reevev1.TriggerScheduleRequest{Name: "s"})
	if err != nil || resp.GetTask() == nil || resp.GetTask().GetId() != schedule.TriggerTaskID("s", e.clock.Now()) {
		t.Fatalf("trigger: %v %v", resp, err)
	}
	e.clock.Advance(5 * time.Minute)
	if o := e.fire(t, "s"); o.GetStarted() != 0 {
		t.Fatalf("a paused schedule started %d", o.GetStarted())
	}
	if got := e.taskIDs(t, "sched-s-"); len(got) != 0 {
		t.Fatalf("a paused schedule started %v", got)
	}
	r, err := e.sc.ResumeSchedule(testCtx(t), &reevev1.ResumeScheduleRequest{Name: "s"})
	if err != nil || len(r.GetSchedule().GetInfo().GetSkipped()) != 1 || r.GetSchedule().GetInfo().GetSkipped()[0].GetCount() != 5 {
		t.Fatalf("resume: %v %v, want the 5 paused times recorded as skipped", r.GetSchedule().GetInfo().GetSkipped(), err)
	}
}

// A firer whose fence no longer holds writes nothing; the task it may have
// started is the one the next firer finds.
func TestScheduleFenceRefusesADeposedFirer(t *testing.T) {
	e := newSchedEnv(t)
	t0 := e.clock.Now()
	e.create(t, everyMinute("s", 0))
	e.clock.Advance(time.Minute)
	stale := proto.Clone(e.fence).(*reevev1.Fence)
	stale.Revision--
	resp, err := e.sup.FireSchedules(testCtx(t), &reevev1.FireSchedulesRequest{Fence: stale, Schedules: []*reevev1.ScheduleRef{{Name: "s"}}})
	if err != nil || resp.GetOutcomes()[0].GetApplied() || codes.Code(resp.GetOutcomes()[0].GetStatus().GetCode()) != codes.FailedPrecondition {
		t.Fatalf("fire with a stale fence: %v %v, want not applied, FAILED_PRECONDITION", resp, err)
	}
	if got := e.get(t, "s"); len(got.GetInfo().GetRecentRuns()) != 0 {
		t.Fatalf("a deposed firer wrote runs: %v", got.GetInfo().GetRecentRuns())
	}
	e.fire(t, "s")
	if got := e.taskIDs(t, "sched-s-"); !slices.Equal(got, idsAt("s", t0.Add(time.Minute))) {
		t.Fatalf("tasks %v, want the one of 10:01 once", got)
	}
}

// A limit of remaining runs: the schedule stops firing at 0; a trigger
// still runs and does not count.
func TestScheduleRemainingRuns(t *testing.T) {
	e := newSchedEnv(t)
	sc := everyMinute("s", reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_ALLOW_ALL)
	sc.RemainingRuns = wrapperspb.Int64(2)
	if got := e.create(t, sc); len(got.GetInfo().GetNextTimes()) != 2 {
		t.Fatalf("next times %v, want the 2 remaining", got.GetInfo().GetNextTimes())
	}
	e.clock.Advance(time.Minute)
	e.fire(t, "s")
	e.clock.Advance(time.Minute)
	e.fire(t, "s")
	e.clock.Advance(time.Minute)
	if o := e.fire(t, "s"); o.GetStarted() != 0 {
		t.Fatalf("a schedule without runs left started %d", o.GetStarted())
	}
	got := e.get(t, "s")
	if got.GetRemainingRuns().GetValue() != 0 || got.GetInfo().GetNextFireTime() != nil || len(got.GetInfo().GetNextTimes()) != 0 || len(e.taskIDs(t, "sched-s-")) != 2 {
		t.Fatalf("remaining %d, next fire %v, next times %v, tasks %v; want 0, none, none, 2",
			got.GetRemainingRuns().GetValue(), got.GetInfo().GetNextFireTime(), got.GetInfo().GetNextTimes(), e.taskIDs(t, "sched-s-"))
	}
	if resp, err := e.sc.TriggerSchedule(testCtx(t), &reevev1.TriggerScheduleRequest{Name: "s"}); err != nil || resp.GetTask() == nil || resp.GetSchedule().GetRemainingRuns().GetValue() != 0 {
		t.Fatalf("trigger with no runs left: %v %v", resp, err)
	}
}

// The metrics of schedules count what a firing did: tasks started by
// origin, times skipped by reason.
func TestScheduleMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	e := newSchedEnv(t, scheduler.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	e.create(t, everyMinute("s", reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_ALLOW_ALL))
	e.clock.Advance(5 * time.Minute)
	e.fire(t, "s")
	e.fire(t, "s") // nothing new: counted once
	origin := func(o string) func(attribute.Set) bool {
		return func(s attribute.Set) bool { v, _ := s.Value("reeve.schedule.origin"); return v.AsString() == o }
	}
	if n := testenv.CounterSum(t, reader, "reeve.schedules.fired", origin("scheduled")); n != 1 {
		t.Errorf("fired (scheduled) %d, want 1", n)
	}
	if n := testenv.CounterSum(t, reader, "reeve.schedules.fired", origin("catch-up")); n != 1 {
		t.Errorf("fired (catch-up) %d, want 1", n)
	}
	if n := testenv.CounterSum(t, reader, "reeve.schedules.skipped", func(attribute.Set) bool { return true }); n != 3 {
		t.Errorf("skipped %d, want 3", n)
	}
}

// A time whose submission is refused for good (here the workflow is gone:
// the record was changed beside the API) is recorded as skipped with why,
// and the schedule moves on instead of retrying it every second.
func TestScheduleRefusedSubmissionIsSkipped(t *testing.T) {
	e := newSchedEnv(t)
	e.create(t, everyMinute("s", 0))
	if _, err := store.New(e.env.Etcd.Client()).UpdateSchedule(testCtx(t), "default", "s", clientv3.Cmp{}, func(sc *reevev1.Schedule) error {
		sc.Action.Workflow.Name = "ghost"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	if o := e.fire(t, "s"); o.GetStarted() != 0 || o.GetSkipped() != 1 {
		t.Fatalf("fire: started %d skipped %d, want 0 and 1", o.GetStarted(), o.GetSkipped())
	}
	got := e.get(t, "s")
	if skip := got.GetInfo().GetSkipped(); len(skip) != 1 || !strings.HasPrefix(skip[0].GetReason(), "refused: ") || !strings.Contains(skip[0].GetReason(), "ghost") {
		t.Fatalf("skipped %v, want the time refused naming the workflow", skip)
	}
	if next := got.GetInfo().GetNextFireTime().AsTime(); !next.Equal(e.clock.Now().Add(time.Minute - scheduler.DefaultScheduleFireAhead)) {
		t.Fatalf("next fire %v, want the next minute less the fire-ahead", next)
	}
}
