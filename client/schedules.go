package client

import (
	"context"
	"fmt"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// Schedules (docs/schedules.md): a registered workflow started at each
// time of a calendar, once per time. Changing a schedule needs the
// namespace's admin role, reading it a client's. The calls act in the
// Client's namespace.

// ScheduleService returns the generated client of the schedule API on the
// Client's connection, for calls the Client does not wrap (UpdateSchedule).
func (c *Client) ScheduleService() reevev1.ScheduleServiceClient {
	return reevev1.NewScheduleServiceClient(c.cc)
}

// Calendar says when a schedule fires: Cron or Every.
type Calendar struct {
	spec *reevev1.ScheduleSpec
}

// Cron fires at the wall-clock times of a 5-field cron expression (or a
// descriptor such as "@daily") in zone, an IANA name ("" is UTC). A time a
// DST change skips fires once at the end of the gap; a repeated one once,
// at its first occurrence.
func Cron(expr, zone string) Calendar {
	return Calendar{&reevev1.ScheduleSpec{Cron: expr, TimeZone: zone}}
}

// Every fires every d (whole seconds, at least 1s) after the Unix epoch
// plus offset (0 <= offset < d): absolute time, not moved by DST.
func Every(d, offset time.Duration) Calendar {
	sp := &reevev1.ScheduleSpec{Every: durationpb.New(d)}
	if offset != 0 {
		sp.Offset = durationpb.New(offset)
	}
	return Calendar{sp}
}

// ScheduleOption sets an optional field of a new schedule.
type ScheduleOption func(*reevev1.Schedule) error

// WithScheduleInput is the tasks' input, encoded as JSON like Submit's;
// default none. An object gets "reeveSchedule": {schedule, nominalTime}.
func WithScheduleInput(v any) ScheduleOption {
	return func(sc *reevev1.Schedule) error {
		in, err := encode(v)
		sc.Action.Input = in
		return err
	}
}

// WithOverlap sets the overlap policy; default skip.
func WithOverlap(p reevev1.ScheduleOverlapPolicy) ScheduleOption {
	return func(sc *reevev1.Schedule) error { sc.Policies.Overlap = p; return nil }
}

// WithCatchUpWindow sets how late a missed time still runs; default 1m.
func WithCatchUpWindow(d time.Duration) ScheduleOption {
	return func(sc *reevev1.Schedule) error { sc.Policies.CatchupWindow = durationpb.New(d); return nil }
}

// WithRemainingRuns stops the schedule after n more times; default
// unlimited.
func WithRemainingRuns(n int64) ScheduleOption {
	return func(sc *reevev1.Schedule) error { sc.RemainingRuns = wrapperspb.Int64(n); return nil }
}

// WithJitter delays each time by up to d, the same delay on every firer;
// default none.
func WithJitter(d time.Duration) ScheduleOption {
	return func(sc *reevev1.Schedule) error { sc.Spec.Jitter = durationpb.New(d); return nil }
}

// CreateSchedule creates schedule name, which starts a task of the
// registered workflow at each time of cal.
func (c *Client) CreateSchedule(ctx context.Context, name, workflow string, cal Calendar, opts ...ScheduleOption) (*reevev1.Schedule, error) {
	sc := &reevev1.Schedule{Namespace: c.namespace, Name: name, Spec: cal.spec,
		Action: &reevev1.ScheduleAction{Workflow: &reevev1.WorkflowRef{Name: workflow}}, Policies: &reevev1.SchedulePolicies{}}
	if sc.Spec == nil {
		return nil, fmt.Errorf("client: create schedule %s: no calendar: use Cron or Every", name)
	}
	for _, o := range opts {
		if err := o(sc); err != nil {
			return nil, fmt.Errorf("client: create schedule %s: %w", name, err)
		}
	}
	resp, err := c.ScheduleService().CreateSchedule(ctx, &reevev1.CreateScheduleRequest{Schedule: sc})
	if err != nil {
		return nil, fmt.Errorf("client: create schedule %s: %w", name, err)
	}
	return resp.GetSchedule(), nil
}

// GetSchedule returns a schedule with its next 5 times, recent runs (with
// their tasks' states) and skipped times.
func (c *Client) GetSchedule(ctx context.Context, name string) (*reevev1.Schedule, error) {
	resp, err := c.ScheduleService().GetSchedule(ctx, &reevev1.GetScheduleRequest{Namespace: c.namespace, Name: name})
	if err != nil {
		return nil, fmt.Errorf("client: get schedule %s: %w", name, err)
	}
	return resp.GetSchedule(), nil
}

// ListSchedules returns every schedule of the namespace, by name.
func (c *Client) ListSchedules(ctx context.Context) ([]*reevev1.Schedule, error) {
	var out []*reevev1.Schedule
	token := ""
	for {
		resp, err := c.ScheduleService().ListSchedules(ctx, &reevev1.ListSchedulesRequest{Namespace: c.namespace, PageToken: token})
		if err != nil {
			return nil, fmt.Errorf("client: list schedules: %w", err)
		}
		out = append(out, resp.GetSchedules()...)
		if token = resp.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}

// PauseSchedule stops a schedule from firing, with a note ("" for none).
func (c *Client) PauseSchedule(ctx context.Context, name, note string) (*reevev1.Schedule, error) {
	resp, err := c.ScheduleService().PauseSchedule(ctx, &reevev1.PauseScheduleRequest{Namespace: c.namespace, Name: name, Note: note})
	if err != nil {
		return nil, fmt.Errorf("client: pause schedule %s: %w", name, err)
	}
	return resp.GetSchedule(), nil
}

// ResumeSchedule fires a paused schedule again from the next time after now.
func (c *Client) ResumeSchedule(ctx context.Context, name, note string) (*reevev1.Schedule, error) {
	resp, err := c.ScheduleService().ResumeSchedule(ctx, &reevev1.ResumeScheduleRequest{Namespace: c.namespace, Name: name, Note: note})
	if err != nil {
		return nil, fmt.Errorf("client: resume schedule %s: %w", name, err)
	}
	return resp.GetSchedule(), nil
}

// TriggerSchedule starts the schedule's task now under its overlap policy
// (also while paused). The Run is nil when the policy did not start it;
// skipped then says why. A trigger is not idempotent: each starts a task.
func (c *Client) TriggerSchedule(ctx context.Context, name string) (run *Run, skipped string, err error) {
	resp, err := c.ScheduleService().TriggerSchedule(ctx, &reevev1.TriggerScheduleRequest{Namespace: c.namespace, Name: name})
	if err != nil {
		return nil, "", fmt.Errorf("client: trigger schedule %s: %w", name, err)
	}
	if resp.GetTask() == nil {
		return nil, resp.GetSkipped(), nil
	}
	return &Run{c: c, namespace: c.namespace, id: resp.GetTask().GetId(), created: true}, "", nil
}

// BackfillSchedule starts the schedule's times in [from, to] (in the past),
// once each: a time that ran is a no-op. At most 1,000 times per call.
func (c *Client) BackfillSchedule(ctx context.Context, name string, from, to time.Time) (*reevev1.BackfillScheduleResponse, error) {
	resp, err := c.ScheduleService().BackfillSchedule(ctx, &reevev1.BackfillScheduleRequest{Namespace: c.namespace, Name: name,
		StartTime: timestamppb.New(from), EndTime: timestamppb.New(to)})
	if err != nil {
		return nil, fmt.Errorf("client: backfill schedule %s: %w", name, err)
	}
	return resp, nil
}

// DeleteSchedule deletes a schedule; the tasks it started stay.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	if _, err := c.ScheduleService().DeleteSchedule(ctx, &reevev1.DeleteScheduleRequest{Namespace: c.namespace, Name: name}); err != nil {
		return fmt.Errorf("client: delete schedule %s: %w", name, err)
	}
	return nil
}
