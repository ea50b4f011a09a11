package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// newTaskRetryCmd is the operator's retry of a FAILED step.
func newTaskRetryCmd(g *globals) *cobra.Command {
	var (
		reason, requestID string
		attempt           int32
	)
	cmd := &cobra.Command{
		Use:   "retry ID STEP [--reason TEXT]",
		Short: "Retry a FAILED step (failure count reset); the task resumes",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closeConn, err := g.dialOperator()
			if err != nil {
				return err
			}
			defer closeConn()
			ctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			resp, err := c.RetryStep(ctx, &reevev1.RetryStepRequest{Namespace: g.namespace, TaskId: args[0], Step: args[1], Attempt: attempt, Reason: reason, RequestId: orNewRequestID(requestID)})
			if err != nil {
				return err
			}
			return g.printTask(cmd.OutOrStdout(), resp.GetTask())
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the task's history")
	cmd.Flags().Int32Var(&attempt, "attempt", 0, "only if the step is still at this attempt (default: any)")
	cmd.Flags().StringVar(&requestID, "request-id", "", requestIDUsage)
	return cmd
}

// newTaskCompensateCmd is the operator's request to undo a task.
func newTaskCompensateCmd(g *globals) *cobra.Command {
	return newTaskActionCmd(g, "compensate", "Undo a running, failed or canceled task: compensate its succeeded steps in reverse order",
		func(ctx context.Context, c reevev1.SupervisorServiceClient, id, reason, requestID string) (*reevev1.Task, error) {
			resp, err := c.CompensateTask(ctx, &reevev1.CompensateTaskRequest{Namespace: g.namespace, TaskId: id, Reason: reason, RequestId: requestID})
			return resp.GetTask(), err
		})
}

func newTaskPauseCmd(g *globals) *cobra.Command {
	return newTaskActionCmd(g, "pause", "Pause a task: none of its steps is dispatched until it is resumed; running steps go on",
		func(ctx context.Context, c reevev1.SupervisorServiceClient, id, reason, requestID string) (*reevev1.Task, error) {
			resp, err := c.PauseTask(ctx, &reevev1.PauseTaskRequest{Namespace: g.namespace, TaskId: id, Reason: reason, RequestId: requestID})
			return resp.GetTask(), err
		})
}

func newTaskResumeCmd(g *globals) *cobra.Command {
	return newTaskActionCmd(g, "resume", "Resume a paused task: its ready steps are dispatched again",
		func(ctx context.Context, c reevev1.SupervisorServiceClient, id, reason, requestID string) (*reevev1.Task, error) {
			resp, err := c.ResumeTask(ctx, &reevev1.ResumeTaskRequest{Namespace: g.namespace, TaskId: id, Reason: reason, RequestId: requestID})
			return resp.GetTask(), err
		})
}

// newTaskActionCmd is an operator's action on one task (`task use ID
// [--reason TEXT] [--request-id ID]`), which call sends.
func newTaskActionCmd(g *globals, use, short string,
	call func(ctx context.Context, c reevev1.SupervisorServiceClient, id, reason, requestID string) (*reevev1.Task, error)) *cobra.Command {
	var reason, requestID string
	cmd := &cobra.Command{
		Use:   use + " ID [--reason TEXT]",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closeConn, err := g.dialOperator()
			if err != nil {
				return err
			}
			defer closeConn()
			ctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			t, err := call(ctx, c, args[0], reason, orNewRequestID(requestID))
			if err != nil {
				return err
			}
			return g.printTask(cmd.OutOrStdout(), t)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the task's history")
	cmd.Flags().StringVar(&requestID, "request-id", "", requestIDUsage)
	return cmd
}

func newTaskRerunCmd(g *globals) *cobra.Command {
	var from, input, id, reason string
	cmd := &cobra.Command{
		Use:   "rerun ID --from STEP [--input JSON] [--id NEW_ID]",
		Short: "Run a FAILED, COMPENSATED or SUCCEEDED task again from a step, as a new task",
		Long: `Run a FAILED, COMPENSATED or SUCCEEDED task again from a step, as a new
task linked to the old one (its rerun_of). The steps that succeeded and were
not undone, other than STEP and the steps downstream of it, keep their
outputs; every other step runs again. The old task is left as it is. It
prints the new task, as 'task submit' does (-o json for JSON). --input
replaces the task's input; --id chooses the new task's id (default: a new
UUID, so that a retry after a lost answer returns the same task).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" {
				return usagef("--from STEP is required")
			}
			in, err := parseInput(input)
			if err != nil {
				return err
			}
			c, closeConn, err := g.dial()
			if err != nil {
				return err
			}
			defer closeConn()
			ctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			resp, err := c.RerunTask(ctx, &reevev1.RerunTaskRequest{Namespace: g.namespace, TaskId: args[0], FromStep: from,
				Input: in, NewTaskId: orNewRequestID(id), Reason: reason})
			if err != nil {
				return err
			}
			return g.printTask(cmd.OutOrStdout(), resp.GetTask())
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the step to run again, with every step downstream of it")
	cmd.Flags().StringVar(&input, "input", "", "the new task's input as JSON (default: the old task's)")
	cmd.Flags().StringVar(&id, "id", "", "the new task's id (default: a new UUID)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the new task's history")
	return cmd
}

const requestIDUsage = "recorded on the action's history events: running the command again with the same id after a lost answer prints the task instead of acting again (default: a new UUID)"

// orNewRequestID returns id, or a new UUID when id is empty.
func orNewRequestID(id string) string {
	if id != "" {
		return id
	}
	return uuid.NewString()
}

func newAlertsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "alerts", Short: "Operator alerts: tasks that failed and need a human"}
	cmd.AddCommand(newAlertsListCmd(g), newAlertsWatchCmd(g), newAlertsAckCmd(g))
	return cmd
}

func newAlertsListCmd(g *globals) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "list [--all]",
		Short: "List unacknowledged alerts (--all: acknowledged ones too)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closeConn, err := g.dialOperator()
			if err != nil {
				return err
			}
			defer closeConn()
			resp := &reevev1.ListAlertsResponse{}
			token := ""
			for {
				ctx, cancel := g.requestCtx(cmd.Context())
				page, err := c.ListAlerts(ctx, &reevev1.ListAlertsRequest{Namespace: g.namespace, IncludeAcknowledged: all, PageToken: token})
				cancel()
				if err != nil {
					return err
				}
				resp.Alerts = append(resp.Alerts, page.GetAlerts()...)
				if token = page.GetNextPageToken(); token == "" {
					break
				}
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			return printAlerts(cmd.OutOrStdout(), resp.GetAlerts())
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "include acknowledged alerts")
	return cmd
}

func newAlertsWatchCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "watch",
		Short: "Print unacknowledged alerts, then every new alert as it is raised (Ctrl-C to stop)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closeConn, err := g.dialOperator()
			if err != nil {
				return err
			}
			defer closeConn()
			stream, err := c.WatchAlerts(cmd.Context(), &reevev1.WatchAlertsRequest{Namespace: g.namespace})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for {
				resp, err := stream.Recv()
				if cmd.Context().Err() != nil || errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				if g.output == "json" {
					err = printJSONLine(out, resp.GetAlert())
				} else {
					a := resp.GetAlert()
					_, err = fmt.Fprintf(out, "%s  %s  task %s  step %s  %s\n", ts(a.GetCreateTime()), a.GetId(), a.GetTaskId(), orDash(a.GetStep()), oneLine(a.GetReason()))
				}
				if err != nil {
					return err
				}
			}
		},
	}
}

func newAlertsAckCmd(g *globals) *cobra.Command {
	var by string
	cmd := &cobra.Command{
		Use:   "ack ALERT-ID [--by NAME]",
		Short: "Acknowledge an alert",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closeConn, err := g.dialOperator()
			if err != nil {
				return err
			}
			defer closeConn()
			ctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			resp, err := c.AckAlert(ctx, &reevev1.AckAlertRequest{Namespace: g.namespace, AlertId: args[0], AcknowledgedBy: by})
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp.GetAlert())
			}
			return printAlerts(cmd.OutOrStdout(), []*reevev1.Alert{resp.GetAlert()})
		},
	}
	cmd.Flags().StringVar(&by, "by", "", "who acknowledges (default \"operator\")")
	return cmd
}

func printAlerts(w io.Writer, alerts []*reevev1.Alert) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTASK\tSTEP\tCREATED\tACKED\tREASON")
	for _, a := range alerts {
		acked := "no"
		switch {
		case a.GetResolution() != "":
			acked = "resolved: " + a.GetResolution() // an operator's action took the task out of FAILED
		case a.GetAcknowledged():
			acked = "by " + a.GetAcknowledgedBy()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.GetId(), a.GetTaskId(), orDash(a.GetStep()), ts(a.GetCreateTime()), acked, oneLine(a.GetReason()))
	}
	return tw.Flush()
}
