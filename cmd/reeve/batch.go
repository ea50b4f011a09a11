package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// reeve batch ACTION [filter flags]: an operator action on every task that
// matches, as a durable job (docs/batches.md).

func newBatchCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "batch", Short: "Act on every task matching a filter, as a durable job: cancel, retry, compensate, pause, resume, rerun"}
	for _, a := range []struct {
		use, short string
		action     reevev1.BatchAction
	}{
		{"cancel", "Cancel every matching task (undoing what succeeded unless --no-compensate)", reevev1.BatchAction_BATCH_ACTION_CANCEL},
		{"retry", "Retry the FAILED step (or --step) of every matching FAILED task", reevev1.BatchAction_BATCH_ACTION_RETRY},
		{"compensate", "Compensate every matching task", reevev1.BatchAction_BATCH_ACTION_COMPENSATE},
		{"pause", "Pause every matching task", reevev1.BatchAction_BATCH_ACTION_PAUSE},
		{"resume", "Resume every matching paused task", reevev1.BatchAction_BATCH_ACTION_RESUME},
		{"rerun", "Run every matching task again from --step, each as a new task", reevev1.BatchAction_BATCH_ACTION_RERUN},
	} {
		cmd.AddCommand(newBatchActionCmd(g, a.use, a.short, a.action))
	}
	cmd.AddCommand(newBatchListCmd(g), newBatchGetCmd(g), newBatchCancelJobCmd(g))
	return cmd
}

func newBatchActionCmd(g *globals, use, short string, action reevev1.BatchAction) *cobra.Command {
	var (
		state, wf, prefix, createdAfter, createdBefore, reason, step, id string
		noCompensate                                                     bool
		labels                                                           []string
	)
	cmd := &cobra.Command{
		Use:   use + " [--state STATE] [--workflow NAME] [--prefix P] [--label K=V] [--created-after T] [--created-before T] --reason TEXT",
		Short: short,
		Long: short + `.

It starts a job and prints it; the job runs on the schedulers, survives their
restarts and acts on each task once ('reeve batch get ID' follows it,
'reeve batch cancel-job ID' stops it). It acts on the tasks that match the
filter (the flags of 'reeve task list') and were created before it started.
There is no confirmation prompt.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := parseTaskState(state)
			if err != nil {
				return err
			}
			req := &reevev1.StartBatchRequest{Namespace: g.namespace, Action: action, Reason: reason, Step: step, NoCompensate: noCompensate,
				BatchId: orNewRequestID(id), Filter: &reevev1.TaskFilter{State: st, Workflow: wf, TaskIdPrefix: prefix}}
			if err := parseTimeFlags(timeFlag{"--created-after", createdAfter, &req.Filter.CreatedAfter}, timeFlag{"--created-before", createdBefore, &req.Filter.CreatedBefore}); err != nil {
				return err
			}
			if req.Filter.Labels, err = parseLabels("--label", labels); err != nil {
				return err
			}
			cc, err := g.connect()
			if err != nil {
				return err
			}
			defer cc.Close()
			ctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			resp, err := reevev1.NewBatchServiceClient(cc).StartBatch(ctx, req)
			if err != nil {
				return err
			}
			return g.printBatch(cmd.OutOrStdout(), resp.GetJob())
		},
	}
	f := cmd.Flags()
	f.StringVar(&state, "state", "", "only tasks in this state")
	f.StringVar(&wf, "workflow", "", "only tasks of this workflow")
	f.StringVar(&prefix, "prefix", "", "only tasks whose id starts with this")
	f.StringArrayVar(&labels, "label", nil, "only tasks with this label KEY=VALUE (repeatable: every one)")
	f.StringVar(&createdAfter, "created-after", "", "only tasks created at or after this RFC 3339 time")
	f.StringVar(&createdBefore, "created-before", "", "only tasks created before this RFC 3339 time")
	f.StringVar(&reason, "reason", "", "why, recorded in each task's history")
	f.StringVar(&id, "id", "", "the job's id (default: a new UUID, so that a retry after a lost answer returns the same job)")
	switch action {
	case reevev1.BatchAction_BATCH_ACTION_RETRY:
		f.StringVar(&step, "step", "", "the step to retry (default: each task's FAILED step)")
	case reevev1.BatchAction_BATCH_ACTION_RERUN:
		f.StringVar(&step, "step", "", "the step to run again from (required)")
	case reevev1.BatchAction_BATCH_ACTION_CANCEL:
		f.BoolVar(&noCompensate, "no-compensate", false, "end the tasks CANCELED at once without undoing")
	}
	return cmd
}

func newBatchListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the namespace's batch jobs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cc, err := g.connect()
			if err != nil {
				return err
			}
			defer cc.Close()
			ctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			resp, err := reevev1.NewBatchServiceClient(cc).ListBatches(ctx, &reevev1.ListBatchesRequest{Namespace: g.namespace})
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tACTION\tSTATE\tMATCHED\tAPPLIED\tSKIPPED\tFAILED\tCREATED")
			for _, j := range resp.GetJobs() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", j.GetId(), batchAction(j.GetAction()), batchState(j.GetState()),
					j.GetMatched(), j.GetApplied(), j.GetSkipped(), j.GetFailed(), ts(j.GetCreateTime()))
			}
			return tw.Flush()
		},
	}
}

func newBatchGetCmd(g *globals) *cobra.Command {
	return newBatchJobCmd(g, "get ID", "Show a batch job and its progress",
		func(ctx context.Context, c reevev1.BatchServiceClient, id string) (*reevev1.BatchJob, error) {
			resp, err := c.GetBatch(ctx, &reevev1.GetBatchRequest{Namespace: g.namespace, BatchId: id})
			return resp.GetJob(), err
		})
}

func newBatchCancelJobCmd(g *globals) *cobra.Command {
	return newBatchJobCmd(g, "cancel-job ID", "Stop a running batch job (the tasks it acted on stay as they are)",
		func(ctx context.Context, c reevev1.BatchServiceClient, id string) (*reevev1.BatchJob, error) {
			resp, err := c.CancelBatch(ctx, &reevev1.CancelBatchRequest{Namespace: g.namespace, BatchId: id})
			return resp.GetJob(), err
		})
}

// newBatchJobCmd is a command that calls call on one job and prints it.
func newBatchJobCmd(g *globals, use, short string, call func(ctx context.Context, c reevev1.BatchServiceClient, id string) (*reevev1.BatchJob, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cc, err := g.connect()
			if err != nil {
				return err
			}
			defer cc.Close()
			ctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			j, err := call(ctx, reevev1.NewBatchServiceClient(cc), args[0])
			if err != nil {
				return err
			}
			return g.printBatch(cmd.OutOrStdout(), j)
		},
	}
}

func (g *globals) printBatch(w io.Writer, j *reevev1.BatchJob) error {
	if g.output == "json" {
		return printJSON(w, j)
	}
	f := j.GetFilter()
	filter := []string{}
	if f.GetState() != reevev1.TaskState_TASK_STATE_UNSPECIFIED {
		filter = append(filter, "state="+shortState(f.GetState(), "TASK_STATE_"))
	}
	if f.GetWorkflow() != "" {
		filter = append(filter, "workflow="+f.GetWorkflow())
	}
	if f.GetTaskIdPrefix() != "" {
		filter = append(filter, "prefix="+f.GetTaskIdPrefix())
	}
	for _, k := range slices.Sorted(maps.Keys(f.GetLabels())) {
		filter = append(filter, "label "+k+"="+f.GetLabels()[k])
	}
	if f.GetCreatedAfter() != nil {
		filter = append(filter, "created-after="+ts(f.GetCreatedAfter()))
	}
	if f.GetCreatedBefore() != nil {
		filter = append(filter, "created-before="+ts(f.GetCreatedBefore()))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "ID:\t%s\n", j.GetId())
	fmt.Fprintf(tw, "NAMESPACE:\t%s\n", j.GetNamespace())
	fmt.Fprintf(tw, "ACTION:\t%s\n", batchAction(j.GetAction()))
	fmt.Fprintf(tw, "FILTER:\t%s\n", orDash(strings.Join(filter, " ")))
	fmt.Fprintf(tw, "STATE:\t%s\n", batchState(j.GetState()))
	fmt.Fprintf(tw, "PROGRESS:\t%d matched: %d applied, %d skipped, %d failed\n", j.GetMatched(), j.GetApplied(), j.GetSkipped(), j.GetFailed())
	fmt.Fprintf(tw, "CREATED:\t%s by %s\n", ts(j.GetCreateTime()), j.GetCreatedBy())
	fmt.Fprintf(tw, "ENDED:\t%s\n", ts(j.GetEndTime()))
	fmt.Fprintf(tw, "REASON:\t%s\n", orDash(j.GetReason()))
	for _, e := range j.GetErrors() {
		fmt.Fprintf(tw, "ERROR:\t%s: %s\n", e.GetTaskId(), oneLine(e.GetMessage()))
	}
	return tw.Flush()
}

func batchAction(a reevev1.BatchAction) string {
	return strings.TrimPrefix(a.String(), "BATCH_ACTION_")
}

func batchState(s reevev1.BatchState) string {
	return strings.TrimPrefix(s.String(), "BATCH_STATE_")
}
