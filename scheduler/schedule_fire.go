package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/schedule"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// Firing a schedule (docs/schedules.md). The supervisor leader reads the
// due index and calls FireSchedules with its fence; for each schedule the
// scheduler reads the record, starts the tasks of the due nominal times
// under the overlap policy (SubmitTask with the id schedule.TaskID derives
// from schedule and time: a time submitted twice starts one task) and
// writes the record, with its next due key, in a transaction that compares
// the record's revision and the fence (the store group-commits the writes
// of concurrent firings, each keeping its own compares:
// internal/store/schedulebatch.go). A lost compare repeats the whole
// firing; the submissions it repeats return the tasks that exist. So a
// firer deposed mid-way, or two firers at once, start each time once.
//
// Firing ahead: a schedule is due opts.fireAhead before its next firing
// time, and a firing runs the times whose firing time comes within
// fireAhead of now, each as a task whose start time is its firing time
// (a delayed start, which this scheduler makes at that time itself, the
// supervisor's timer its backstop: schedule_starts.go). So the submission
// and the schedule's write are done before the time, and at the time only
// the task's start is left. Under an overlap policy other than allow_all
// a time is fired ahead only when no run is active then; else the firing
// stops before it and the schedule is due again at the time itself, when
// the policy decides as without firing ahead. A pause or a delete cancels
// the runs fired ahead that have not started (cancelUnstarted).

// MaxFireSchedules bounds the schedules of one FireSchedules request.
const MaxFireSchedules = 1000

// FireSchedules implements SupervisorService.
func (svc *supervisorService) FireSchedules(ctx context.Context, req *reevev1.FireSchedulesRequest) (*reevev1.FireSchedulesResponse, error) {
	if req.GetFence() == nil {
		return nil, statusErr(&workflow.FieldError{Field: "fence", Reason: "required: FireSchedules is for the supervisor leader"})
	}
	if n := len(req.GetSchedules()); n > MaxFireSchedules {
		return nil, statusErr(&workflow.FieldError{Field: "schedules", Reason: fmt.Sprintf("%d schedules, at most %d per request", n, MaxFireSchedules)})
	}
	for i, r := range req.GetSchedules() {
		if err := workflow.ValidateNamespace(fmt.Sprintf("schedules[%d].namespace", i), r.GetNamespace()); err != nil {
			return nil, statusErr(err)
		}
		if err := workflow.ValidateName(fmt.Sprintf("schedules[%d].name", i), r.GetName()); err != nil {
			return nil, statusErr(err)
		}
	}
	_, fences, err := svc.fence(req.GetFence())
	if err != nil {
		return nil, statusErr(err)
	}
	// One read for the records of the whole call, not one per schedule.
	refs := make([]store.ScheduleRef, len(req.GetSchedules()))
	for i, r := range req.GetSchedules() {
		refs[i] = store.ScheduleRef{Namespace: workflow.Namespace(r.GetNamespace()), Name: r.GetName()}
	}
	recs, revs, err := svc.store.GetSchedules(ctx, refs)
	if err != nil {
		return nil, statusErr(err)
	}
	resp := &reevev1.FireSchedulesResponse{Outcomes: make([]*reevev1.FireOutcome, len(req.GetSchedules()))}
	sem := make(chan struct{}, firesInFlight)
	var wg sync.WaitGroup
	for i, r := range refs {
		if recs[i] == nil {
			resp.Outcomes[i] = &reevev1.FireOutcome{Status: scheduleStatus(&store.NotFoundError{
				What: fmt.Sprintf("schedule %q in namespace %q", r.Name, r.Namespace), Kind: store.KindSchedule, Namespace: r.Namespace, Name: r.Name}).Proto()}
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			o, err := svc.schedules.fireSchedule(ctx, r.Namespace, r.Name, recs[i], revs[i], fences[0])
			if err != nil {
				o.Status = scheduleStatus(err).Proto()
			} else {
				o.Applied = true
			}
			resp.Outcomes[i] = o
		})
	}
	wg.Wait()
	return resp, nil
}

// firesInFlight bounds the schedules one FireSchedules call fires at once.
const firesInFlight = 64

// fireSchedule fires one schedule at the clock's now (see above),
// starting from its record cur read at revision rev.
func (sch *schedules) fireSchedule(ctx context.Context, ns, name string, cur *reevev1.Schedule, rev int64, fence clientv3.Cmp) (*reevev1.FireOutcome, error) {
	ctx, span := sch.tel.startFire(ctx, ns, name)
	var (
		o     *reevev1.FireOutcome
		skips map[string]int
		ahead []string // tasks submitted ahead of their time, by any run of the change below
		ran   []string // tasks the last run of the change records as runs
	)
	final, err := sch.store.UpdateScheduleFrom(ctx, ns, name, cur, rev, fence, func(sc *reevev1.Schedule) error {
		o, ran = &reevev1.FireOutcome{}, nil
		now := sch.opts.clock.Now()
		sc.Info = infoOf(sc)
		cal, err := scheduleCalendar("spec", sc.GetSpec())
		if err != nil || sc.GetPaused() {
			sc.Info.NextFireTime = nil // a stored spec that does not compile fires no more
			return nil
		}
		f := sch.newFiring(sc, now)
		f.cal, skips = cal, f.skips
		f.startBuffered(ctx)
		var (
			plan  schedule.Plan
			atNow bool // a time is left to be fired at its time
		)
		if f.err == nil {
			// The times whose firing time comes within fireAhead; the
			// catch-up window still counts back from now.
			plan = cal.Due(ns, name, handledUntil(sc), now.Add(sch.opts.fireAhead), catchUpWindow(sc)+sch.opts.fireAhead, maxTimesPerFire)
			if plan.Missed.Count > 0 {
				addSkip(sc, plan.Missed, schedule.SkipReasonCatchUp, now)
				o.Skipped += int32(plan.Missed.Count)
				f.skips[schedule.SkipReasonCatchUp] += plan.Missed.Count
			}
			// Handled up to the plan's end, or, when the times stop early
			// (an error, no run left), up to the last time handled.
			last := plan.Last
			for _, t := range plan.Run {
				if sc.RemainingRuns != nil && sc.GetRemainingRuns().GetValue() <= 0 {
					last = t.Add(-time.Second)
					break
				}
				if f.running && f.policy != schedule.OverlapAllowAll && t.Add(cal.Jitter(ns, name, t)).After(now) {
					// Ahead of its time while a run is active: the policy
					// decides at the time.
					last, atNow = t.Add(-time.Second), true
					break
				}
				origin := "scheduled"
				if now.Sub(t) > time.Second+cal.Jitter(ns, name, t) {
					origin = "catch-up"
				}
				if !f.offer(ctx, t, origin) {
					last = t.Add(-time.Second)
					break
				}
			}
			sc.Info.HandledUntil = timestamppb.New(last)
		}
		ahead, ran = append(ahead, f.ahead...), f.ids
		o.Started, o.Skipped, o.Buffered = o.Started+f.started, o.Skipped+f.skipped, o.Buffered+f.buffered
		if atNow {
			sch.setNextFireAhead(sc, cal, now, f.err != nil, 0)
		} else {
			sch.setNextFire(sc, cal, now, f.err != nil)
		}
		if f.err != nil {
			sch.log.WarnContext(ctx, "fire schedule", "namespace", ns, "schedule", name, "err", f.err)
		}
		return nil
	})
	if o == nil {
		o = &reevev1.FireOutcome{}
	}
	if err == nil {
		for reason, n := range skips {
			sch.tel.skippedSome(ctx, ns, reason, n)
		}
	}
	// Tasks submitted ahead that the written record does not run (the run
	// of the change that submitted them lost its compare, and the one
	// written found the schedule paused or deleted, or left the time to
	// its policy at the time) are canceled before they start. After any
	// other error the next firing records them: their ids are their
	// times'.
	if err == nil || store.IsNotFound(err) {
		if cerr := sch.cancelUnstarted(ctx, ns, unrecorded(ahead, ran, final), "schedule "+name+" no longer runs this time as fired (paused, deleted, or a run became active before it)"); cerr != nil {
			sch.log.WarnContext(ctx, "cancel unrecorded schedule run", "namespace", ns, "schedule", name, "err", cerr)
		}
	}
	endFire(span, o.GetStarted(), o.GetSkipped(), o.GetBuffered(), err)
	return o, err
}

// unrecorded returns the ids of ahead that the written record sc (nil:
// deleted) does not run, once each: not started by the run of the change
// that wrote it (ran), nor by another firing whose write came first. That
// one's runs are among sc's recent runs, which keep only the newest: so,
// under allow_all (which skips no time for a run), a time sc handled is
// one it ran as well.
func unrecorded(ahead, ran []string, sc *reevev1.Schedule) []string {
	var out []string
	for _, id := range ahead {
		if !slices.Contains(ran, id) && !slices.Contains(out, id) && !runs(sc, id) {
			out = append(out, id)
		}
	}
	return out
}

// runs reports whether sc, not paused, runs task id as one of its times.
func runs(sc *reevev1.Schedule, id string) bool {
	if sc == nil || sc.GetPaused() {
		return false
	}
	if slices.ContainsFunc(sc.GetInfo().GetRecentRuns(), func(r *reevev1.ScheduleRun) bool { return r.GetTaskId() == id }) {
		return true
	}
	_, t, err := schedule.ParseTaskID(id)
	return err == nil && overlapOf(sc.GetPolicies().GetOverlap()) == schedule.OverlapAllowAll && !t.After(handledUntil(sc))
}

// unstarted returns the tasks of sc that may have been fired ahead and
// not started: those of its recent runs, and, as the recent runs keep only
// the newest (a firing may fire ahead more times than that) and a firer
// that died before its write recorded none, the ids of its nominal times
// whose firing time is within MaxScheduleFireAhead (any firer's
// fire-ahead) of now. Neither is filtered by this clock: a run whose time
// passed may not have started (the leader's timer is late, or the
// scheduler that starts it has a clock behind this one's), and
// cancelUnstarted decides in the task's write, passing over those that
// started or do not exist.
func unstarted(sc *reevev1.Schedule, now time.Time) []string {
	var ids []string
	for _, r := range sc.GetInfo().GetRecentRuns() {
		ids = append(ids, r.GetTaskId())
	}
	cal, err := scheduleCalendar("spec", sc.GetSpec())
	if err != nil {
		return ids
	}
	ns, name := sc.GetNamespace(), sc.GetName()
	from, until := now.Add(-MaxScheduleFireAhead), now.Add(MaxScheduleFireAhead)
	// A time fires at most the spec's jitter after it, and not before it.
	for t, ok := cal.Next(from.Add(-cal.Spec().Jitter)); ok && !t.After(until); t, ok = cal.Next(t) {
		fire := t.Add(cal.Jitter(ns, name, t))
		if id := schedule.TaskID(name, t); fire.After(from) && !fire.After(until) && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// errStarted refuses cancelUnstarted's write of a task that started.
var errStarted = errors.New("the task started")

// cancelUnstarted cancels each of the tasks ids that still waits for its
// start time (a run fired ahead); a task that started, ended or is gone is
// left as it is. It tries them all and returns the first other error.
func (sch *schedules) cancelUnstarted(ctx context.Context, ns string, ids []string, reason string) error {
	var first error
	for _, id := range ids {
		_, err := sch.scheduler.eng.update(ctx, taskWrite{ns: ns, id: id,
			change: func(t *reevev1.Task, now time.Time, _ *writeClaim) (effects, error) {
				if _, ok := taskstate.AwaitingStart(t); !ok {
					return effects{}, errStarted
				}
				return effects{}, taskstate.Cancel(t, reason, "schedule", false, now)
			}})
		switch {
		case err == nil:
			sch.log.InfoContext(ctx, "schedule run canceled before its start", "namespace", ns, "task", id, "reason", reason)
		case errors.Is(err, errStarted), errors.Is(err, taskstate.ErrTerminal), errors.Is(err, taskstate.ErrUndoing), store.IsNotFound(err):
		case first == nil:
			first = fmt.Errorf("cancel task %s: %w", id, err)
		}
	}
	return first
}

// handledUntil is the time up to which a schedule's nominal times are
// handled.
func handledUntil(sc *reevev1.Schedule) time.Time { return sc.GetInfo().GetHandledUntil().AsTime() }

// infoOf returns sc's info, created when missing.
func infoOf(sc *reevev1.Schedule) *reevev1.ScheduleInfo {
	if sc.GetInfo() == nil {
		return &reevev1.ScheduleInfo{}
	}
	return sc.GetInfo()
}

// setNextFire sets when the firer looks at sc again: fireAhead before its
// next firing time, sooner while times are buffered (to see the running
// task end) or after a failed firing; never while paused or when no
// calendar run remains.
func (sch *schedules) setNextFire(sc *reevev1.Schedule, cal *schedule.Calendar, now time.Time, failed bool) {
	sch.setNextFireAhead(sc, cal, now, failed, sch.opts.fireAhead)
}

// setNextFireAhead is setNextFire looking at sc ahead before its next
// firing time (0: at it).
func (sch *schedules) setNextFireAhead(sc *reevev1.Schedule, cal *schedule.Calendar, now time.Time, failed bool, ahead time.Duration) {
	if sc.GetPaused() {
		sc.Info.NextFireTime = nil // buffered times wait for the resume too
		return
	}
	var next time.Time
	if sc.RemainingRuns == nil || sc.GetRemainingRuns().GetValue() > 0 {
		if t, ok := cal.Next(handledUntil(sc)); ok {
			next = t.Add(cal.Jitter(sc.GetNamespace(), sc.GetName(), t) - ahead)
		}
	}
	if soon := now.Add(bufferPoll); len(sc.GetInfo().GetBufferedTimes()) > 0 && (next.IsZero() || soon.Before(next)) {
		next = soon
	}
	if soon := now.Add(fireRetry); failed && (next.IsZero() || soon.Before(next)) {
		next = soon
	}
	if next.IsZero() {
		sc.Info.NextFireTime = nil
		return
	}
	sc.Info.NextFireTime = timestamppb.New(next)
}

// firing applies the overlap policy to the times offered to one schedule
// in one pass, starting, buffering or skipping each; it stops at the first
// error (err), leaving the rest for the next pass.
type firing struct {
	sch     *schedules
	sc      *reevev1.Schedule
	cal     *schedule.Calendar // for the jitter of a time's lateness; nil: none
	skips   map[string]int     // times skipped by reason, for the metric once written
	policy  schedule.Overlap
	now     time.Time
	running bool
	err     error

	started, skipped, buffered, existing int32
	ids                                  []string
	ahead                                []string // of ids, those fired ahead of their start
}

func (sch *schedules) newFiring(sc *reevev1.Schedule, now time.Time) *firing {
	return &firing{sch: sch, sc: sc, policy: overlapOf(sc.GetPolicies().GetOverlap()), now: now, skips: map[string]int{}}
}

// refresh drops the ended tasks from the active ones; running says
// whether one is left. A task that cannot be read (etcd, the archive)
// counts as running.
func (f *firing) refresh(ctx context.Context) {
	info := f.sc.Info
	if f.policy == schedule.OverlapAllowAll {
		info.ActiveTaskIds, f.running = nil, false
		return
	}
	keep := info.ActiveTaskIds[:0:0]
	for _, id := range info.GetActiveTaskIds() {
		resp, err := f.sch.scheduler.GetTask(ctx, &reevev1.GetTaskRequest{Namespace: f.sc.GetNamespace(), TaskId: id})
		switch {
		case status.Code(err) == codes.NotFound:
		case err != nil:
			keep = append(keep, id)
		case !taskstate.TerminalTask(resp.GetTask().GetState()):
			keep = append(keep, id)
		}
	}
	info.ActiveTaskIds = keep
	f.running = len(keep) > 0
}

// startBuffered refreshes the active tasks and starts the oldest buffered
// time when none is running (one per pass: it is then running).
func (f *firing) startBuffered(ctx context.Context) {
	f.refresh(ctx)
	info := f.sc.Info
	if f.running || len(info.GetBufferedTimes()) == 0 {
		return
	}
	t := info.BufferedTimes[0].AsTime()
	if f.start(ctx, t, schedule.TaskID(f.sc.GetName(), t), "buffered") {
		info.BufferedTimes = info.BufferedTimes[1:]
	}
}

// offer applies the policy to nominal time t; false when it failed (the
// time is not handled).
func (f *firing) offer(ctx context.Context, t time.Time, origin string) bool {
	counts := origin == "scheduled" || origin == "catch-up"
	info := f.sc.Info
	switch f.policy.Decide(f.running, len(info.GetBufferedTimes())) {
	case schedule.ActionSkip:
		reason := schedule.SkipReasonOverlap
		if len(info.GetBufferedTimes()) > 0 {
			reason = schedule.SkipReasonBufferFull
		}
		addSkip(f.sc, schedule.Missed{First: t, Last: t, Count: 1}, reason, f.now)
		f.skipped++
		f.skips[reason]++
		return true
	case schedule.ActionBuffer:
		info.BufferedTimes = append(info.BufferedTimes, timestamppb.New(t))
		f.buffered++
	case schedule.ActionCancelAndStart:
		if !f.cancelActive(ctx) {
			return false
		}
		fallthrough
	default:
		skipped := f.skipped
		if !f.start(ctx, t, schedule.TaskID(f.sc.GetName(), t), origin) {
			return false
		}
		if f.skipped > skipped {
			return true // refused for good: not a run
		}
	}
	if counts && f.sc.RemainingRuns != nil {
		f.sc.RemainingRuns.Value--
	}
	return true
}

// cancelActive cancels the schedule's running tasks (cancel_other).
func (f *firing) cancelActive(ctx context.Context) bool {
	for _, id := range f.sc.Info.GetActiveTaskIds() {
		_, err := f.sch.scheduler.CancelTask(ctx, &reevev1.CancelTaskRequest{Namespace: f.sc.GetNamespace(), TaskId: id,
			Reason: fmt.Sprintf("canceled by schedule %s (overlap policy cancel_other)", f.sc.GetName())})
		if err != nil && status.Code(err) != codes.NotFound {
			f.err = fmt.Errorf("cancel task %s: %w", id, err)
			return false
		}
	}
	f.sc.Info.ActiveTaskIds = nil
	f.running = false
	return true
}

// start submits the task of time t under id and records the run; false
// when the submission failed. A task that exists (the time ran, or a
// firing before this one started it) counts as started.
func (f *firing) start(ctx context.Context, t time.Time, id, origin string) bool {
	sc := f.sc
	// No priority and no fairness key: a schedule's tasks run at the
	// default priority, with the workflow's fairness key if it has one
	// (issue 36). Should ScheduleAction carry them one day, they go here:
	// the id derived from the time keeps the submission idempotent, and the
	// request digest then includes them.
	req := &reevev1.SubmitTaskRequest{Namespace: sc.GetNamespace(), TaskId: id,
		Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: proto.Clone(sc.GetAction().GetWorkflow()).(*reevev1.WorkflowRef)},
		Input:    scheduledInput(sc, t)}
	// A nominal time's task starts at its firing time (nominal time plus
	// jitter): later when it is fired ahead, at once when that passed. Every
	// submission of a time carries it, so that they are one request (the
	// same digest) whenever they are sent.
	at := t
	if origin != "trigger" {
		if f.cal != nil {
			at = t.Add(f.cal.Jitter(sc.GetNamespace(), sc.GetName(), t))
		}
		req.StartTime = timestamppb.New(at)
	}
	// Fired ahead, the task is started here at its time, the supervisor's
	// timer its backstop (schedule_starts.go), while this scheduler has
	// room for it.
	var backstop time.Duration
	if at.After(f.now) && f.sch.starts.reserve() {
		backstop = StartBackstop
		defer func() {
			if backstop > 0 {
				f.sch.starts.release()
			}
		}()
	}
	resp, err := f.sch.scheduler.submit(ctx, req, backstop)
	if err == nil && resp.GetCreated() && backstop > 0 {
		f.sch.starts.add(sc.GetNamespace(), id, at)
		backstop = 0 // the reservation is used
	}
	running := true
	switch {
	case status.Code(err) == codes.AlreadyExists:
		// The time ran with another input (the schedule was updated since):
		// it ran; its state is read below.
		f.existing++
		running = false
	case err != nil && !retryableSubmit(status.Code(err)):
		// Refused for good (the workflow or its version is gone, the input
		// no longer fits): the
		// time is recorded as skipped with why, not retried every second.
		addSkip(sc, schedule.Missed{First: t, Last: t, Count: 1}, "refused: "+status.Convert(err).Message(), f.now)
		f.skipped++
		f.skips["refused"]++
		return true
	case err != nil:
		f.err = fmt.Errorf("submit task %s: %w", id, err)
		return false
	case !resp.GetCreated():
		f.existing++
		running = !taskstate.TerminalTask(resp.GetTask().GetState())
	default:
		// Fired ahead, its lateness is taken when it starts
		// (scheduledStart).
		f.sch.tel.startedOne(ctx, sc.GetNamespace(), origin, f.now.Sub(at))
	}
	if at.After(f.now) {
		f.ahead = append(f.ahead, id)
	}
	f.started++
	f.ids = append(f.ids, id)
	if running && f.policy != schedule.OverlapAllowAll { // allow_all looks at no run: none tracked
		f.running = true
		if !slices.Contains(sc.Info.ActiveTaskIds, id) {
			sc.Info.ActiveTaskIds = append(sc.Info.ActiveTaskIds, id)
			if n := len(sc.Info.ActiveTaskIds); n > maxActive {
				sc.Info.ActiveTaskIds = sc.Info.ActiveTaskIds[n-maxActive:]
			}
		}
	}
	if !slices.ContainsFunc(sc.Info.GetRecentRuns(), func(r *reevev1.ScheduleRun) bool { return r.GetTaskId() == id }) {
		run := &reevev1.ScheduleRun{NominalTime: timestamppb.New(t), StartTime: timestamppb.New(latest(f.now, at)), TaskId: id, Origin: origin}
		sc.Info.RecentRuns = append([]*reevev1.ScheduleRun{run}, sc.Info.GetRecentRuns()...)
		sc.Info.RecentRuns = sc.Info.RecentRuns[:min(len(sc.Info.RecentRuns), maxRecentRuns)]
		sc.Info.RunCount++
	}
	return true
}

// latest returns the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// retryableSubmit reports whether a refused submission may succeed when
// sent again soon: etcd or the scheduler unavailable or overloaded, a lost
// race, a rate limit.
func retryableSubmit(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.DeadlineExceeded, codes.Canceled, codes.Internal:
		return true
	}
	return false
}

// addSkip records skipped times, newest first, merging them into the
// newest entry when it has the same reason.
func addSkip(sc *reevev1.Schedule, m schedule.Missed, reason string, now time.Time) {
	info := sc.Info
	if len(info.Skipped) > 0 && info.Skipped[0].GetReason() == reason && info.Skipped[0].GetLastTime().AsTime().Before(m.First) {
		e := info.Skipped[0]
		e.LastTime, e.Count, e.More, e.RecordTime = timestamppb.New(m.Last), e.GetCount()+int32(m.Count), e.GetMore() || m.More, timestamppb.New(now)
		return
	}
	e := &reevev1.ScheduleSkip{FirstTime: timestamppb.New(m.First), LastTime: timestamppb.New(m.Last), Count: int32(m.Count),
		More: m.More, Reason: reason, RecordTime: timestamppb.New(now)}
	info.Skipped = append([]*reevev1.ScheduleSkip{e}, info.GetSkipped()...)
	info.Skipped = info.Skipped[:min(len(info.Skipped), maxSkipped)]
}

// scheduleStatus maps a schedule call's error to its status: the store's
// not-found and already-exists of a schedule get the schedule reasons.
func scheduleStatus(err error) *status.Status {
	var nf *store.NotFoundError
	switch {
	case errors.As(err, &nf) && nf.Kind == store.KindSchedule:
		return toStatus(refuse(codes.NotFound, ReasonScheduleNotFound, "%s", err.Error()))
	case errors.Is(err, store.ErrAlreadyExists):
		return toStatus(refuse(codes.AlreadyExists, ReasonScheduleAlreadyExists, "%s", err.Error()))
	}
	return toStatus(err)
}
