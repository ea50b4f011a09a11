package scheduler

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/schedule"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/workflow"
)

var _ reevev1.ScheduleServiceServer = (*scheduleService)(nil)

// scheduleService implements reeve.v1.ScheduleService: thin handlers over
// the store's schedules (internal/store/schedules.go) and the firing of
// schedule_fire.go. Its writes are not fenced (they are a client's, like a
// task's cancel): each compares the record's revision and retries.
type scheduleService struct {
	reevev1.UnimplementedScheduleServiceServer
	sch *schedules
}

// schedules is the scheduler's part for schedules: their records, what
// they show, and their firing (schedule_fire.go), for the supervisor
// leader's FireSchedules and an admin's trigger and backfill. The tasks a
// schedule starts go through SubmitTask in process.
type schedules struct {
	opts      *options
	store     *store.Store
	log       *slog.Logger
	tel       *scheduleInstruments
	scheduler *schedulerService
	starts    *selfStarts // the runs fired ahead here, started here (schedule_starts.go)
}

// nextTimes is how many next times a schedule shows.
const nextTimes = 5

// CreateSchedule implements ScheduleService.
func (svc *scheduleService) CreateSchedule(ctx context.Context, req *reevev1.CreateScheduleRequest) (*reevev1.CreateScheduleResponse, error) {
	cal, err := validateSchedule(req.GetSchedule())
	if err != nil {
		return nil, statusErr(err)
	}
	sc := clientFields(req.GetSchedule())
	if err := svc.sch.checkScheduleWorkflow(ctx, sc); err != nil {
		return nil, scheduleStatus(err).Err()
	}
	now := svc.sch.opts.clock.Now()
	sc.CreateTime, sc.UpdateTime = timestamppb.New(now), timestamppb.New(now)
	sc.Info = &reevev1.ScheduleInfo{HandledUntil: timestamppb.New(now)}
	svc.sch.setNextFire(sc, cal, now, false)
	if err := svc.sch.store.CreateSchedule(ctx, sc); err != nil {
		return nil, scheduleStatus(err).Err()
	}
	svc.sch.log.InfoContext(ctx, "schedule created", "namespace", sc.GetNamespace(), "schedule", sc.GetName())
	return &reevev1.CreateScheduleResponse{Schedule: svc.sch.showSchedule(ctx, sc, false)}, nil
}

// clientFields copies what a client sets on a schedule, with the
// namespace defaulted.
func clientFields(in *reevev1.Schedule) *reevev1.Schedule {
	return &reevev1.Schedule{
		Namespace: workflow.Namespace(in.GetNamespace()), Name: in.GetName(),
		Spec:          proto.Clone(in.GetSpec()).(*reevev1.ScheduleSpec),
		Action:        proto.Clone(in.GetAction()).(*reevev1.ScheduleAction),
		Policies:      proto.Clone(in.GetPolicies()).(*reevev1.SchedulePolicies),
		RemainingRuns: in.RemainingRuns,
	}
}

// checkScheduleWorkflow refuses a schedule of a workflow that is not
// registered (the field it names is the action's).
func (sch *schedules) checkScheduleWorkflow(ctx context.Context, sc *reevev1.Schedule) error {
	ref := sc.GetAction().GetWorkflow()
	_, err := sch.store.GetWorkflow(ctx, sc.GetNamespace(), ref.GetName(), ref.GetVersion())
	if store.IsNotFound(err) {
		return &workflow.FieldError{Field: "schedule.action.workflow", Reason: err.Error() + ": register it first"}
	}
	return err
}

// scheduleRef validates a (namespace, name) pair and returns the namespace.
func scheduleRef(ns, name string) (string, error) {
	if err := workflow.ValidateNamespace("namespace", ns); err != nil {
		return "", err
	}
	if err := workflow.ValidateName("name", name); err != nil {
		return "", err
	}
	return workflow.Namespace(ns), nil
}

// GetSchedule implements ScheduleService.
func (svc *scheduleService) GetSchedule(ctx context.Context, req *reevev1.GetScheduleRequest) (*reevev1.GetScheduleResponse, error) {
	ns, err := scheduleRef(req.GetNamespace(), req.GetName())
	if err != nil {
		return nil, statusErr(err)
	}
	sc, _, err := svc.sch.store.GetSchedule(ctx, ns, req.GetName())
	if err != nil {
		return nil, scheduleStatus(err).Err()
	}
	return &reevev1.GetScheduleResponse{Schedule: svc.sch.showSchedule(ctx, sc, true)}, nil
}

// showSchedule fills what a schedule shows but does not store: its next
// times and, with outcomes, the state of its recent runs' tasks.
func (sch *schedules) showSchedule(ctx context.Context, sc *reevev1.Schedule, outcomes bool) *reevev1.Schedule {
	sc = proto.Clone(sc).(*reevev1.Schedule)
	sc.Info = infoOf(sc)
	if cal, err := scheduleCalendar("spec", sc.GetSpec()); err == nil && !sc.GetPaused() && (sc.RemainingRuns == nil || sc.GetRemainingRuns().GetValue() > 0) {
		n := nextTimes
		if sc.RemainingRuns != nil {
			n = int(min(int64(n), sc.GetRemainingRuns().GetValue()))
		}
		for _, t := range cal.NextN(handledUntil(sc), n) {
			sc.Info.NextTimes = append(sc.Info.NextTimes, timestamppb.New(t))
		}
	}
	if outcomes {
		for _, r := range sc.Info.GetRecentRuns() {
			resp, err := sch.scheduler.GetTask(ctx, &reevev1.GetTaskRequest{Namespace: sc.GetNamespace(), TaskId: r.GetTaskId()})
			if err == nil {
				r.TaskState = resp.GetTask().GetState()
			}
		}
	}
	return sc
}

// ListSchedules implements ScheduleService.
func (svc *scheduleService) ListSchedules(ctx context.Context, req *reevev1.ListSchedulesRequest) (*reevev1.ListSchedulesResponse, error) {
	if err := workflow.ValidateNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, statusErr(err)
	}
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, statusErr(err)
	}
	after := ""
	if tok := req.GetPageToken(); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || workflow.ValidateName("page_token", string(b)) != nil {
			return nil, statusErr(&workflow.FieldError{Field: "page_token", Reason: "not a token this API issued"})
		}
		after = string(b)
	}
	scs, more, err := svc.sch.store.ListSchedules(ctx, workflow.Namespace(req.GetNamespace()), after, size)
	if err != nil {
		return nil, scheduleStatus(err).Err()
	}
	resp := &reevev1.ListSchedulesResponse{}
	for _, sc := range scs {
		resp.Schedules = append(resp.Schedules, svc.sch.showSchedule(ctx, sc, false))
	}
	if more && len(scs) > 0 {
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(scs[len(scs)-1].GetName()))
	}
	return resp, nil
}

// UpdateSchedule implements ScheduleService: the new spec takes effect
// from the next time after now (times between the last handled one and
// now under the old spec are not run).
func (svc *scheduleService) UpdateSchedule(ctx context.Context, req *reevev1.UpdateScheduleRequest) (*reevev1.UpdateScheduleResponse, error) {
	cal, err := validateSchedule(req.GetSchedule())
	if err != nil {
		return nil, statusErr(err)
	}
	in := clientFields(req.GetSchedule())
	if err := svc.sch.checkScheduleWorkflow(ctx, in); err != nil {
		return nil, scheduleStatus(err).Err()
	}
	sc, err := svc.sch.store.UpdateSchedule(ctx, in.GetNamespace(), in.GetName(), clientv3.Cmp{}, func(sc *reevev1.Schedule) error {
		now := svc.sch.opts.clock.Now()
		sc.Spec, sc.Action, sc.Policies, sc.RemainingRuns = in.Spec, in.Action, in.Policies, in.RemainingRuns
		sc.UpdateTime = timestamppb.New(now)
		sc.Info = infoOf(sc)
		if handledUntil(sc).Before(now) {
			sc.Info.HandledUntil = timestamppb.New(now)
		}
		svc.sch.setNextFire(sc, cal, now, false)
		return nil
	})
	if err != nil {
		return nil, scheduleStatus(err).Err()
	}
	return &reevev1.UpdateScheduleResponse{Schedule: svc.sch.showSchedule(ctx, sc, true)}, nil
}

// PauseSchedule implements ScheduleService.
func (svc *scheduleService) PauseSchedule(ctx context.Context, req *reevev1.PauseScheduleRequest) (*reevev1.PauseScheduleResponse, error) {
	sc, err := svc.sch.setPaused(ctx, req.GetNamespace(), req.GetName(), true, req.GetNote())
	if err != nil {
		return nil, err
	}
	return &reevev1.PauseScheduleResponse{Schedule: sc}, nil
}

// ResumeSchedule implements ScheduleService.
func (svc *scheduleService) ResumeSchedule(ctx context.Context, req *reevev1.ResumeScheduleRequest) (*reevev1.ResumeScheduleResponse, error) {
	sc, err := svc.sch.setPaused(ctx, req.GetNamespace(), req.GetName(), false, req.GetNote())
	if err != nil {
		return nil, err
	}
	return &reevev1.ResumeScheduleResponse{Schedule: sc}, nil
}

// setPaused pauses or resumes a schedule; a resume records the times
// that passed while paused as skipped and fires from the next one after
// now. It returns a status error.
func (sch *schedules) setPaused(ctx context.Context, ns, name string, paused bool, note string) (*reevev1.Schedule, error) {
	ns, err := scheduleRef(ns, name)
	if err != nil {
		return nil, statusErr(err)
	}
	if len(note) > maxScheduleNote {
		return nil, statusErr(&workflow.FieldError{Field: "note", Reason: fmt.Sprintf("longer than %d bytes", maxScheduleNote)})
	}
	passed := 0
	sc, err := sch.store.UpdateSchedule(ctx, ns, name, clientv3.Cmp{}, func(sc *reevev1.Schedule) error {
		now := sch.opts.clock.Now()
		passed = 0
		sc.Info = infoOf(sc)
		cal, err := scheduleCalendar("spec", sc.GetSpec())
		if err != nil {
			return err
		}
		if !paused && sc.GetPaused() {
			if m := cal.Passed(ns, name, handledUntil(sc), now); m.Count > 0 {
				addSkip(sc, m, schedule.SkipReasonPaused, now)
				passed = m.Count
			}
			if handledUntil(sc).Before(now) {
				sc.Info.HandledUntil = timestamppb.New(now)
			}
		}
		sc.Paused, sc.Note, sc.UpdateTime = paused, note, timestamppb.New(now)
		sch.setNextFire(sc, cal, now, false)
		return nil
	})
	if err != nil {
		return nil, scheduleStatus(err).Err()
	}
	if passed > 0 {
		sch.tel.skippedSome(ctx, ns, schedule.SkipReasonPaused, passed)
	}
	sch.log.InfoContext(ctx, "schedule paused or resumed", "namespace", ns, "schedule", name, "paused", paused, "note", note)
	if paused {
		// Its runs fired ahead that have not started do not start (a
		// firing under way cancels what it submits: fireSchedule).
		if err := sch.cancelUnstarted(ctx, ns, unstarted(sc, sch.opts.clock.Now()), "schedule "+name+" paused before this run started"); err != nil {
			return nil, toStatus(fmt.Errorf("schedule paused; its run about to start was not canceled (pause again to retry): %w", err)).Err()
		}
	}
	return sch.showSchedule(ctx, sc, false), nil
}

// TriggerSchedule implements ScheduleService: the action starts now under
// the overlap policy; a trigger is not buffered (under a buffer policy,
// while a run is active, it is skipped).
func (svc *scheduleService) TriggerSchedule(ctx context.Context, req *reevev1.TriggerScheduleRequest) (*reevev1.TriggerScheduleResponse, error) {
	ns, err := scheduleRef(req.GetNamespace(), req.GetName())
	if err != nil {
		return nil, statusErr(err)
	}
	resp := &reevev1.TriggerScheduleResponse{}
	var id string
	sc, err := svc.sch.store.UpdateSchedule(ctx, ns, req.GetName(), clientv3.Cmp{}, func(sc *reevev1.Schedule) error {
		now := svc.sch.opts.clock.Now()
		sc.Info = infoOf(sc)
		f := svc.sch.newFiring(sc, now)
		f.refresh(ctx)
		resp.Skipped, id = "", ""
		switch f.policy.Decide(f.running, len(sc.Info.GetBufferedTimes())) {
		case schedule.ActionSkip, schedule.ActionBuffer:
			resp.Skipped = "overlap: a run of the schedule is active (policy " + f.policy.String() + "); a trigger is not buffered"
			return nil
		case schedule.ActionCancelAndStart:
			if !f.cancelActive(ctx) {
				return f.err
			}
		}
		id = schedule.TriggerTaskID(sc.GetName(), now)
		if !f.start(ctx, now, id, "trigger") {
			return f.err
		}
		if f.skipped > 0 {
			resp.Skipped, id = sc.Info.Skipped[0].GetReason(), ""
		}
		return nil
	})
	if err != nil {
		return nil, scheduleStatus(err).Err()
	}
	if id != "" {
		t, err := svc.sch.scheduler.GetTask(ctx, &reevev1.GetTaskRequest{Namespace: ns, TaskId: id})
		if err == nil {
			resp.Task = t.GetTask()
		}
	}
	resp.Schedule = svc.sch.showSchedule(ctx, sc, false)
	return resp, nil
}

// BackfillSchedule implements ScheduleService.
func (svc *scheduleService) BackfillSchedule(ctx context.Context, req *reevev1.BackfillScheduleRequest) (*reevev1.BackfillScheduleResponse, error) {
	ns, err := scheduleRef(req.GetNamespace(), req.GetName())
	if err != nil {
		return nil, statusErr(err)
	}
	for _, ts := range []struct {
		field string
		t     *timestamppb.Timestamp
	}{{"start_time", req.GetStartTime()}, {"end_time", req.GetEndTime()}} {
		if ts.t == nil {
			return nil, statusErr(&workflow.FieldError{Field: ts.field, Reason: "required"})
		}
		if err := ts.t.CheckValid(); err != nil {
			return nil, statusErr(&workflow.FieldError{Field: ts.field, Reason: err.Error()})
		}
	}
	from, to := req.GetStartTime().AsTime(), req.GetEndTime().AsTime()
	if to.Before(from) {
		return nil, statusErr(&workflow.FieldError{Field: "end_time", Reason: "before start_time"})
	}
	if now := svc.sch.opts.clock.Now(); to.After(now) {
		return nil, statusErr(&workflow.FieldError{Field: "end_time", Reason: "in the future: a backfill starts past times"})
	}
	cur, _, err := svc.sch.store.GetSchedule(ctx, ns, req.GetName())
	if err != nil {
		return nil, scheduleStatus(err).Err()
	}
	cal, err := scheduleCalendar("spec", cur.GetSpec())
	if err != nil {
		return nil, statusErr(err)
	}
	var times []time.Time
	for t, ok := cal.Next(from.Add(-time.Nanosecond)); ok && !t.After(to); t, ok = cal.Next(t) {
		if len(times) == MaxBackfillTimes {
			return nil, statusErr(&workflow.FieldError{Field: "end_time", Reason: fmt.Sprintf("the range holds more than %d times: backfill it in parts", MaxBackfillTimes)})
		}
		times = append(times, t)
	}
	resp := &reevev1.BackfillScheduleResponse{}
	var skips map[string]int
	sc, err := svc.sch.store.UpdateSchedule(ctx, ns, req.GetName(), clientv3.Cmp{}, func(sc *reevev1.Schedule) error {
		now := svc.sch.opts.clock.Now()
		sc.Info = infoOf(sc)
		f := svc.sch.newFiring(sc, now)
		f.cal = cal // the start time of a time's task includes its jitter
		f.refresh(ctx)
		for _, t := range times {
			if !f.offer(ctx, t, "backfill") {
				return f.err
			}
		}
		resp.TaskIds, resp.Existing, resp.Buffered, resp.Skipped = f.ids, f.existing, f.buffered, f.skipped
		skips = f.skips
		svc.sch.setNextFire(sc, cal, now, false)
		return nil
	})
	if err != nil {
		return nil, scheduleStatus(err).Err()
	}
	for reason, n := range skips {
		svc.sch.tel.skippedSome(ctx, ns, reason, n)
	}
	resp.Schedule = svc.sch.showSchedule(ctx, sc, false)
	return resp, nil
}

// DeleteSchedule implements ScheduleService.
func (svc *scheduleService) DeleteSchedule(ctx context.Context, req *reevev1.DeleteScheduleRequest) (*reevev1.DeleteScheduleResponse, error) {
	ns, err := scheduleRef(req.GetNamespace(), req.GetName())
	if err != nil {
		return nil, statusErr(err)
	}
	sc, err := svc.sch.store.DeleteSchedule(ctx, ns, req.GetName())
	if err != nil {
		return nil, scheduleStatus(err).Err()
	}
	svc.sch.log.InfoContext(ctx, "schedule deleted", "namespace", ns, "schedule", req.GetName())
	// Its runs fired ahead that have not started do not start (a firing
	// under way cancels what it submits: fireSchedule).
	if err := svc.sch.cancelUnstarted(ctx, ns, unstarted(sc, svc.sch.opts.clock.Now()), "schedule "+req.GetName()+" deleted before this run started"); err != nil {
		return nil, toStatus(fmt.Errorf("schedule deleted, but its run about to start was not canceled (cancel that task to stop it): %w", err)).Err()
	}
	return &reevev1.DeleteScheduleResponse{}, nil
}
