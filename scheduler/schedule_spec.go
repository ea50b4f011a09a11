package scheduler

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/schedule"
	"github.com/reeve-org/reeve/internal/workflow"
)

// Bounds of a schedule's fields and of what it keeps.
const (
	// MaxCatchUpWindow bounds a schedule's catch-up window.
	MaxCatchUpWindow = 30 * 24 * time.Hour
	// MaxBackfillTimes bounds the nominal times of one backfill.
	MaxBackfillTimes = 1000
	maxScheduleNote  = 1024
	maxRecentRuns    = 20
	maxSkipped       = 20
	maxActive        = 100
	// maxTimesPerFire bounds the times one firing of one schedule starts;
	// the rest are due again at once.
	maxTimesPerFire = 100
	// bufferPoll is how soon a schedule with buffered times is looked at
	// again: the end of its running task is seen this late.
	bufferPoll = time.Second
	// fireRetry is how soon a schedule whose firing failed (a refused
	// submission, etcd) is fired again.
	fireRetry = time.Second
)

// The ErrorInfo reasons of the schedule calls (docs/errors.md).
const (
	ReasonScheduleNotFound      = "SCHEDULE_NOT_FOUND"
	ReasonScheduleAlreadyExists = "SCHEDULE_ALREADY_EXISTS"
)

// scheduleCalendar compiles a schedule's spec; field names are under
// prefix ("schedule.spec").
func scheduleCalendar(prefix string, sp *reevev1.ScheduleSpec) (*schedule.Calendar, error) {
	if sp == nil {
		return nil, &workflow.FieldError{Field: prefix, Reason: "required"}
	}
	s := schedule.Spec{Cron: sp.GetCron(), Zone: sp.GetTimeZone()}
	for _, d := range []struct {
		field string
		in    interface {
			CheckValid() error
			AsDuration() time.Duration
		}
		out *time.Duration
		set bool
	}{
		{"every", sp.GetEvery(), &s.Every, sp.GetEvery() != nil},
		{"offset", sp.GetOffset(), &s.Offset, sp.GetOffset() != nil},
		{"jitter", sp.GetJitter(), &s.Jitter, sp.GetJitter() != nil},
	} {
		if !d.set {
			continue
		}
		if err := d.in.CheckValid(); err != nil {
			return nil, &workflow.FieldError{Field: prefix + "." + d.field, Reason: err.Error()}
		}
		*d.out = d.in.AsDuration()
	}
	if sp.GetEvery() != nil && s.Every == 0 {
		return nil, &workflow.FieldError{Field: prefix + ".every", Reason: "0s: an interval is at least 1s"}
	}
	for _, ts := range []struct {
		field string
		valid func() error
		set   bool
		out   *time.Time
	}{
		{"start_time", sp.GetStartTime().CheckValid, sp.GetStartTime() != nil, &s.Start},
		{"end_time", sp.GetEndTime().CheckValid, sp.GetEndTime() != nil, &s.End},
	} {
		if !ts.set {
			continue
		}
		if err := ts.valid(); err != nil {
			return nil, &workflow.FieldError{Field: prefix + "." + ts.field, Reason: err.Error()}
		}
	}
	if sp.GetStartTime() != nil {
		s.Start = sp.GetStartTime().AsTime()
	}
	if sp.GetEndTime() != nil {
		s.End = sp.GetEndTime().AsTime()
	}
	return schedule.Compile(prefix, s)
}

// overlapOf maps the API's policy to the calendar's.
func overlapOf(p reevev1.ScheduleOverlapPolicy) schedule.Overlap {
	switch p {
	case reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_BUFFER_ONE:
		return schedule.OverlapBufferOne
	case reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_BUFFER_ALL:
		return schedule.OverlapBufferAll
	case reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_CANCEL_OTHER:
		return schedule.OverlapCancelOther
	case reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_ALLOW_ALL:
		return schedule.OverlapAllowAll
	}
	return schedule.OverlapSkip
}

// catchUpWindow is a schedule's window, the default when unset.
func catchUpWindow(sc *reevev1.Schedule) time.Duration {
	if w := sc.GetPolicies().GetCatchupWindow(); w != nil {
		return w.AsDuration()
	}
	return schedule.DefaultCatchUpWindow
}

// validateSchedule checks what a client sets on a schedule (create and
// update) and returns its calendar. Nothing is read or written.
func validateSchedule(sc *reevev1.Schedule) (*schedule.Calendar, error) {
	if sc == nil {
		return nil, &workflow.FieldError{Field: "schedule", Reason: "required"}
	}
	if err := workflow.ValidateNamespace("schedule.namespace", sc.GetNamespace()); err != nil {
		return nil, err
	}
	if err := workflow.ValidateName("schedule.name", sc.GetName()); err != nil {
		return nil, err
	}
	cal, err := scheduleCalendar("schedule.spec", sc.GetSpec())
	if err != nil {
		return nil, err
	}
	a := sc.GetAction()
	if a == nil {
		return nil, &workflow.FieldError{Field: "schedule.action", Reason: "required"}
	}
	if a.GetWorkflow() == nil {
		return nil, &workflow.FieldError{Field: "schedule.action.workflow", Reason: "required: a registered workflow"}
	}
	if err := workflow.ValidateName("schedule.action.workflow.name", a.GetWorkflow().GetName()); err != nil {
		return nil, err
	}
	if a.GetWorkflow().GetVersion() < 0 {
		return nil, &workflow.FieldError{Field: "schedule.action.workflow.version", Reason: "negative"}
	}
	if err := workflow.ValidateValue("schedule.action.input", a.GetInput(), workflow.MaxInputBytes-512); err != nil {
		return nil, err
	}
	p := sc.GetPolicies()
	if _, ok := reevev1.ScheduleOverlapPolicy_name[int32(p.GetOverlap())]; !ok {
		return nil, &workflow.FieldError{Field: "schedule.policies.overlap", Reason: fmt.Sprintf("%d is not an overlap policy", p.GetOverlap())}
	}
	if w := p.GetCatchupWindow(); w != nil {
		if err := w.CheckValid(); err != nil || w.AsDuration() < 0 || w.AsDuration() > MaxCatchUpWindow {
			return nil, &workflow.FieldError{Field: "schedule.policies.catchup_window", Reason: fmt.Sprintf("from 0 to %v", MaxCatchUpWindow)}
		}
	}
	if sc.RemainingRuns != nil && sc.GetRemainingRuns().GetValue() < 0 {
		return nil, &workflow.FieldError{Field: "schedule.remaining_runs", Reason: "negative"}
	}
	return cal, nil
}

// scheduledInput is the input of the task of nominal time at: the
// action's input with "reeveSchedule" set when it is an object (or unset).
func scheduledInput(sc *reevev1.Schedule, at time.Time) *structpb.Value {
	in := sc.GetAction().GetInput()
	if in != nil && in.GetStructValue() == nil {
		return in
	}
	fields := map[string]*structpb.Value{}
	for k, v := range in.GetStructValue().GetFields() {
		fields[k] = v
	}
	fields["reeveSchedule"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"schedule":    structpb.NewStringValue(sc.GetName()),
		"nominalTime": structpb.NewStringValue(at.UTC().Format(time.RFC3339)),
	}})
	return structpb.NewStructValue(&structpb.Struct{Fields: fields})
}
