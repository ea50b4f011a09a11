package main

import (
	"context"
	"fmt"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/schedule"
)

// The schedule commands (docs/schedules.md): reeve.v1.ScheduleService.

func newScheduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "schedule", Short: "Start tasks on a calendar, once per time (docs/schedules.md)"}
	cmd.AddCommand(newScheduleCreateCmd(g), newScheduleUpdateCmd(g), newScheduleListCmd(g), newScheduleGetCmd(g),
		newSchedulePauseCmd(g, true), newSchedulePauseCmd(g, false), newScheduleTriggerCmd(g),
		newScheduleBackfillCmd(g), newScheduleDeleteCmd(g))
	return cmd
}

// dialSchedules returns a client of the schedule API.
func (g *globals) dialSchedules() (reevev1.ScheduleServiceClient, func(), error) {
	cc, err := g.connect()
	if err != nil {
		return nil, nil, err
	}
	return reevev1.NewScheduleServiceClient(cc), func() { _ = cc.Close() }, nil
}

// scheduleCall dials, runs one call bounded by --timeout, and prints the
// schedule it returns (nil: nothing to print).
func (g *globals) scheduleCall(cmd *cobra.Command, call func(c reevev1.ScheduleServiceClient, ctx context.Context) (*reevev1.Schedule, error)) error {
	c, closeConn, err := g.dialSchedules()
	if err != nil {
		return err
	}
	defer closeConn()
	ctx, cancel := g.requestCtx(cmd.Context())
	defer cancel()
	sc, err := call(c, ctx)
	if err != nil || sc == nil {
		return err
	}
	if g.output == "json" {
		return printJSON(cmd.OutOrStdout(), sc)
	}
	return printSchedule(cmd.OutOrStdout(), sc)
}

func newScheduleCreateCmd(g *globals) *cobra.Command { return newScheduleWriteCmd(g, false) }

func newScheduleUpdateCmd(g *globals) *cobra.Command { return newScheduleWriteCmd(g, true) }

// newScheduleWriteCmd is `schedule create`, or with update `schedule
// update`, which replaces a schedule's spec, action and policies with its
// flags' (effective from the next time) and keeps its runs.
func newScheduleWriteCmd(g *globals, update bool) *cobra.Command {
	var (
		workflow, cron, tz, overlap, input string
		every, offset, jitter, catchUp     time.Duration
		start, end                         string
		version                            int32
		remaining                          int64
	)
	use, short := "create", "Create a schedule that starts a task of a workflow at each time"
	if update {
		use, short = "update", "Replace a schedule's calendar, action and policies (from its next time on; its runs stay)"
	}
	cmd := &cobra.Command{
		Use:   use + " NAME --workflow W (--cron EXPR | --every DURATION) [--tz ZONE] [--overlap POLICY] [--catchup-window D] [--input JSON]",
		Short: short,
		Long: `Create a schedule. --cron takes 5 fields (minute hour day-of-month month
day-of-week) or a descriptor (@hourly, @daily, @weekly, @monthly, @yearly),
read as wall-clock time in --tz; --every an interval of whole seconds (at
least 1s), absolute time, shifted by --offset. Overlap policies: skip
(default), buffer_one, buffer_all, cancel_other, allow_all. The task of
nominal time T has the id sched-NAME-<T in UTC as 20060102T150405Z>: a time
starts once.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if workflow == "" {
				return usagef("--workflow is required")
			}
			if (cron == "") == (every == 0) {
				return usagef("exactly one of --cron and --every is required")
			}
			pol, err := schedule.ParseOverlap(overlap)
			if err != nil {
				return usagef("--overlap: %v", err)
			}
			in, err := parseInput(input)
			if err != nil {
				return err
			}
			sc := &reevev1.Schedule{Namespace: g.namespace, Name: args[0],
				Spec:     &reevev1.ScheduleSpec{Cron: cron, TimeZone: tz},
				Action:   &reevev1.ScheduleAction{Workflow: &reevev1.WorkflowRef{Name: workflow, Version: version}, Input: in},
				Policies: &reevev1.SchedulePolicies{Overlap: reevev1.ScheduleOverlapPolicy(pol + 1)}}
			if every != 0 {
				sc.Spec.Every = durationpb.New(every)
			}
			if offset != 0 {
				sc.Spec.Offset = durationpb.New(offset)
			}
			if jitter != 0 {
				sc.Spec.Jitter = durationpb.New(jitter)
			}
			if cmd.Flags().Changed("catchup-window") {
				sc.Policies.CatchupWindow = durationpb.New(catchUp)
			}
			if cmd.Flags().Changed("remaining-runs") {
				sc.RemainingRuns = wrapperspb.Int64(remaining)
			}
			if err := parseTimeFlags(timeFlag{"--start", start, &sc.Spec.StartTime}, timeFlag{"--end", end, &sc.Spec.EndTime}); err != nil {
				return err
			}
			return g.scheduleCall(cmd, func(c reevev1.ScheduleServiceClient, ctx context.Context) (*reevev1.Schedule, error) {
				if update {
					resp, err := c.UpdateSchedule(ctx, &reevev1.UpdateScheduleRequest{Schedule: sc})
					return resp.GetSchedule(), err
				}
				resp, err := c.CreateSchedule(ctx, &reevev1.CreateScheduleRequest{Schedule: sc})
				return resp.GetSchedule(), err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&workflow, "workflow", "", "the registered workflow each time starts (required)")
	f.Int32Var(&version, "version", 0, "the workflow's version (default: the latest at each time)")
	f.StringVar(&cron, "cron", "", "a 5-field cron expression or a descriptor such as @daily")
	f.DurationVar(&every, "every", 0, "an interval, whole seconds, at least 1s")
	f.DurationVar(&offset, "offset", 0, "shifts --every (0 <= offset < every)")
	f.StringVar(&tz, "tz", "", "IANA time zone of --cron, e.g. Europe/Berlin (default UTC)")
	f.StringVar(&overlap, "overlap", "skip", "what a time does while a run is active: skip, buffer_one, buffer_all, cancel_other, allow_all")
	f.DurationVar(&catchUp, "catchup-window", schedule.DefaultCatchUpWindow, "how late a missed time still runs")
	f.DurationVar(&jitter, "jitter", 0, "delay each time by up to this much (the same delay on every firer)")
	f.StringVar(&start, "start", "", "no time before this (RFC 3339)")
	f.StringVar(&end, "end", "", "no time after this (RFC 3339)")
	f.Int64Var(&remaining, "remaining-runs", 0, "stop after this many times (default: unlimited)")
	f.StringVar(&input, "input", "", "the tasks' input as JSON; an object gets \"reeveSchedule\": {schedule, nominalTime}")
	return cmd
}

func newScheduleGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show a schedule: its next 5 times, recent runs and skipped times",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.scheduleCall(cmd, func(c reevev1.ScheduleServiceClient, ctx context.Context) (*reevev1.Schedule, error) {
				resp, err := c.GetSchedule(ctx, &reevev1.GetScheduleRequest{Namespace: g.namespace, Name: args[0]})
				return resp.GetSchedule(), err
			})
		},
	}
}

func newScheduleListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the namespace's schedules",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closeConn, err := g.dialSchedules()
			if err != nil {
				return err
			}
			defer closeConn()
			resp := &reevev1.ListSchedulesResponse{}
			token := ""
			for range 10_000 {
				ctx, cancel := g.requestCtx(cmd.Context())
				page, err := c.ListSchedules(ctx, &reevev1.ListSchedulesRequest{Namespace: g.namespace, PageToken: token})
				cancel()
				if err != nil {
					return err
				}
				resp.Schedules = append(resp.Schedules, page.GetSchedules()...)
				if token = page.GetNextPageToken(); token == "" {
					break
				}
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			return printScheduleList(cmd.OutOrStdout(), resp.GetSchedules())
		},
	}
}

func newSchedulePauseCmd(g *globals, pause bool) *cobra.Command {
	var note string
	use, short := "pause NAME [--note TEXT]", "Stop a schedule from firing (triggers and backfills still run)"
	if !pause {
		use, short = "resume NAME [--note TEXT]", "Fire a paused schedule again, from the next time after now"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.scheduleCall(cmd, func(c reevev1.ScheduleServiceClient, ctx context.Context) (*reevev1.Schedule, error) {
				if pause {
					resp, err := c.PauseSchedule(ctx, &reevev1.PauseScheduleRequest{Namespace: g.namespace, Name: args[0], Note: note})
					return resp.GetSchedule(), err
				}
				resp, err := c.ResumeSchedule(ctx, &reevev1.ResumeScheduleRequest{Namespace: g.namespace, Name: args[0], Note: note})
				return resp.GetSchedule(), err
			})
		},
	}
	cmd.Flags().StringVar(&note, "note", "", "why, shown with the schedule")
	return cmd
}

func newScheduleTriggerCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "trigger NAME",
		Short: "Start the schedule's task now, under its overlap policy (also while paused)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closeConn, err := g.dialSchedules()
			if err != nil {
				return err
			}
			defer closeConn()
			ctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			resp, err := c.TriggerSchedule(ctx, &reevev1.TriggerScheduleRequest{Namespace: g.namespace, Name: args[0]})
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			if resp.GetSkipped() != "" {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "not started: %s\n", resp.GetSkipped())
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "started task %s\n", resp.GetTask().GetId())
			return err
		},
	}
}

func newScheduleBackfillCmd(g *globals) *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "backfill NAME --from T --to T",
		Short: "Start the schedule's times in a past range, once each (RFC 3339 times, inclusive)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var ts [2]time.Time
			for i, b := range []struct{ flag, v string }{{"--from", from}, {"--to", to}} {
				if b.v == "" {
					return usagef("%s is required", b.flag)
				}
				t, err := time.Parse(time.RFC3339, b.v)
				if err != nil {
					return usagef("%s: not an RFC 3339 time: %v", b.flag, err)
				}
				ts[i] = t
			}
			c, closeConn, err := g.dialSchedules()
			if err != nil {
				return err
			}
			defer closeConn()
			ctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			resp, err := c.BackfillSchedule(ctx, &reevev1.BackfillScheduleRequest{Namespace: g.namespace, Name: args[0],
				StartTime: timestamppb.New(ts[0]), EndTime: timestamppb.New(ts[1])})
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%d tasks (%d new, %d had run), %d buffered, %d skipped\n",
				len(resp.GetTaskIds()), len(resp.GetTaskIds())-int(resp.GetExisting()), resp.GetExisting(), resp.GetBuffered(), resp.GetSkipped())
			return err
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "first time of the range (RFC 3339)")
	cmd.Flags().StringVar(&to, "to", "", "last time of the range (RFC 3339)")
	return cmd
}

func newScheduleDeleteCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a schedule (the tasks it started stay)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.scheduleCall(cmd, func(c reevev1.ScheduleServiceClient, ctx context.Context) (*reevev1.Schedule, error) {
				_, err := c.DeleteSchedule(ctx, &reevev1.DeleteScheduleRequest{Namespace: g.namespace, Name: args[0]})
				return nil, err
			})
		},
	}
}

// specString says when a schedule fires, in words.
func specString(sp *reevev1.ScheduleSpec) string {
	var s string
	if sp.GetCron() != "" {
		s = fmt.Sprintf("cron %q", sp.GetCron())
		if sp.GetTimeZone() != "" {
			s += " in " + sp.GetTimeZone()
		}
	} else {
		s = "every " + sp.GetEvery().AsDuration().String()
		if o := sp.GetOffset().AsDuration(); o != 0 {
			s += " +" + o.String()
		}
	}
	if j := sp.GetJitter().AsDuration(); j != 0 {
		s += ", jitter " + j.String()
	}
	return s
}

func overlapName(p reevev1.ScheduleOverlapPolicy) string {
	if p == reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_UNSPECIFIED {
		return "skip"
	}
	return strings.ToLower(strings.TrimPrefix(p.String(), "SCHEDULE_OVERLAP_POLICY_"))
}

func printSchedule(w io.Writer, sc *reevev1.Schedule) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	info := sc.GetInfo()
	state := "active"
	if sc.GetPaused() {
		state = "paused"
	}
	if sc.GetNote() != "" {
		state += " (" + sc.GetNote() + ")"
	}
	wf := sc.GetAction().GetWorkflow().GetName()
	if v := sc.GetAction().GetWorkflow().GetVersion(); v > 0 {
		wf = fmt.Sprintf("%s@%d", wf, v)
	}
	window := "1m0s"
	if cw := sc.GetPolicies().GetCatchupWindow(); cw != nil {
		window = cw.AsDuration().String()
	}
	remaining := "unlimited"
	if sc.RemainingRuns != nil {
		remaining = fmt.Sprint(sc.GetRemainingRuns().GetValue())
	}
	fmt.Fprintf(tw, "SCHEDULE:\t%s (namespace %s)\n", sc.GetName(), sc.GetNamespace())
	fmt.Fprintf(tw, "SPEC:\t%s\n", specString(sc.GetSpec()))
	fmt.Fprintf(tw, "WORKFLOW:\t%s\n", wf)
	fmt.Fprintf(tw, "POLICIES:\toverlap %s, catch-up window %s, remaining runs %s\n", overlapName(sc.GetPolicies().GetOverlap()), window, remaining)
	fmt.Fprintf(tw, "STATE:\t%s, %d runs\n", state, info.GetRunCount())
	var next []string
	for _, t := range info.GetNextTimes() {
		next = append(next, ts(t))
	}
	fmt.Fprintf(tw, "NEXT:\t%s\n", orDash(strings.Join(next, ", ")))
	if len(info.GetBufferedTimes()) > 0 {
		fmt.Fprintf(tw, "BUFFERED:\t%d times, the first %s\n", len(info.GetBufferedTimes()), ts(info.GetBufferedTimes()[0]))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(info.GetRecentRuns()) > 0 {
		fmt.Fprintln(w, "\nRECENT RUNS")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NOMINAL\tSTARTED\tTASK\tORIGIN\tSTATE")
		for _, r := range info.GetRecentRuns() {
			st := "-"
			if r.GetTaskState() != reevev1.TaskState_TASK_STATE_UNSPECIFIED {
				st = shortState(r.GetTaskState(), "TASK_STATE_")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ts(r.GetNominalTime()), ts(r.GetStartTime()), r.GetTaskId(), r.GetOrigin(), st)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(info.GetSkipped()) > 0 {
		fmt.Fprintln(w, "\nSKIPPED")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "FIRST\tLAST\tCOUNT\tWHY")
		for _, s := range info.GetSkipped() {
			n := fmt.Sprint(s.GetCount())
			if s.GetMore() {
				n += "+"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ts(s.GetFirstTime()), ts(s.GetLastTime()), n, s.GetReason())
		}
		return tw.Flush()
	}
	return nil
}

func printScheduleList(w io.Writer, scs []*reevev1.Schedule) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSPEC\tWORKFLOW\tSTATE\tNEXT\tLAST RUN")
	for _, sc := range scs {
		state := "active"
		if sc.GetPaused() {
			state = "paused"
		}
		next, last := "-", "-"
		if n := sc.GetInfo().GetNextTimes(); len(n) > 0 {
			next = ts(n[0])
		}
		if r := sc.GetInfo().GetRecentRuns(); len(r) > 0 {
			last = r[0].GetTaskId()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sc.GetName(), specString(sc.GetSpec()), sc.GetAction().GetWorkflow().GetName(), state, next, last)
	}
	return tw.Flush()
}
