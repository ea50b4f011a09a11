package main

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/spf13/cobra"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

func newTaskCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "task", Short: "Submit, inspect, follow and cancel tasks"}
	cmd.AddCommand(newTaskSubmitCmd(g), newTaskGetCmd(g), newTaskListCmd(g), newTaskWatchCmd(g), newTaskCancelCmd(g),
		newTaskRetryCmd(g), newTaskCompensateCmd(g), newTaskPauseCmd(g), newTaskResumeCmd(g), newTaskRerunCmd(g),
		newTaskCompleteCmd(g), newTaskTokenCmd(g), newTaskWaitingCmd(g))
	return cmd
}

func newTaskSubmitCmd(g *globals) *cobra.Command {
	var (
		workflow, file, input, id string
		labels                    []string
		version                   int32
		wait, exitCode            bool
		timers                    timerFlags // timers.go
	)
	cmd := &cobra.Command{
		Use:   "submit (--workflow NAME [--version N] | -f FILE) [--input JSON] [--id ID] [--start-in DURATION | --start-at TIME] [--task-timeout DURATION] [--wait [--exit-code=false]]",
		Short: "Submit a task running a registered workflow or an inline definition",
		Long: `submit starts a task. With --id the submission is idempotent: submitting the
same request again returns the existing task. With --wait it follows the task
and prints it once it reached a terminal state; the exit code is 0 when it
SUCCEEDED and 3 when it ended otherwise (FAILED, COMPENSATED, CANCELED), or
0 whatever the state with --exit-code=false (read "state").

With --start-in or --start-at the task waits PENDING, with nothing dispatched,
until its start time (it can be canceled meanwhile). --start-in is relative
to this command's clock: for an idempotent retry with --id, use --start-at.
--task-timeout bounds the whole task from its start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &reevev1.SubmitTaskRequest{Namespace: g.namespace, TaskId: id}
			switch {
			case (workflow == "") == (file == ""):
				return usagef("exactly one of --workflow or -f is required")
			case workflow != "":
				req.Workflow = &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: workflow, Version: version}}
			default:
				if cmd.Flags().Changed("version") {
					return usagef("--version goes with --workflow, not -f")
				}
				w, err := readWorkflowFile(file)
				if err != nil {
					return err
				}
				req.Workflow = &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: w}
			}
			if cmd.Flags().Changed("exit-code") && !wait {
				return usagef("--exit-code goes with --wait")
			}
			in, err := parseInput(input)
			if err != nil {
				return err
			}
			req.Input = in
			if req.Labels, err = parseLabels("--label", labels); err != nil {
				return err
			}
			if err := timers.apply(cmd.Flags(), req, time.Now()); err != nil {
				return err
			}
			c, closeConn, err := g.dial()
			if err != nil {
				return err
			}
			defer closeConn()
			ctx, cancel := g.requestCtx(cmd.Context())
			resp, err := c.SubmitTask(ctx, req)
			cancel()
			if err != nil && file != "" {
				return fileRefusal(err, file, "inline_workflow")
			}
			if err != nil {
				return err
			}
			task := resp.GetTask()
			if wait {
				if task, err = watchTask(cmd.Context(), c, g.namespace, task.GetId(), nil); err != nil {
					return err
				}
			}
			// A step no agent serves says so from the start.
			pctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			if err := g.printTaskMarked(pctx, c, cmd.OutOrStdout(), task); err != nil {
				return err
			}
			if wait && exitCode && task.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
				return exitCodeError{code: exitTaskNotSucceeded}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&workflow, "workflow", "", "name of a registered workflow")
	f.Int32Var(&version, "version", 0, "workflow version (default: the latest)")
	f.StringVarP(&file, "file", "f", "", "inline workflow definition (.json or .yaml, protojson of reeve.v1.Workflow)")
	f.StringVar(&input, "input", "", "task input as JSON")
	f.StringArrayVar(&labels, "label", nil, "a label KEY=VALUE to find the task by (repeatable, at most 16)")
	f.StringVar(&id, "id", "", "task id, for idempotent submission (default: generated)")
	f.BoolVar(&wait, "wait", false, "wait until the task is terminal and print it")
	timers.add(f)
	f.BoolVar(&exitCode, "exit-code", true, "with --wait, exit 3 unless the task SUCCEEDED (--exit-code=false: exit 0 whatever its end)")
	return cmd
}

// watchTask follows a task until it is terminal and returns its last state;
// each change is passed to each (if not nil).
func watchTask(ctx context.Context, c reevev1.SchedulerServiceClient, ns, id string, each func(*reevev1.Task) error) (*reevev1.Task, error) {
	stream, err := c.WatchTask(ctx, &reevev1.WatchTaskRequest{Namespace: ns, TaskId: id})
	if err != nil {
		return nil, err
	}
	var last *reevev1.Task
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) && last != nil {
			return last, nil
		}
		if err != nil {
			return nil, err
		}
		last = resp.GetTask()
		if each != nil {
			if err := each(last); err != nil {
				return nil, err
			}
		}
	}
}

func (g *globals) printTask(w io.Writer, t *reevev1.Task) error {
	return g.printTaskAgents(w, t, nil)
}

// printTaskAgents prints t, marking its steps from the namespace's agents
// (printTask).
func (g *globals) printTaskAgents(w io.Writer, t *reevev1.Task, agents *namespaceAgents) error {
	if g.output == "json" {
		return printJSON(w, t)
	}
	return printTask(w, t, agents)
}

// printTaskMarked prints t as printTaskAgents does, with the agents of its
// namespace read first when the table marks something from them (best
// effort: without them, no step is marked).
func (g *globals) printTaskMarked(ctx context.Context, c reevev1.SchedulerServiceClient, w io.Writer, t *reevev1.Task) error {
	var agents *namespaceAgents
	if g.output != "json" && needsAgents(t) {
		agents, _ = listAgents(ctx, c, t.GetNamespace())
	}
	return g.printTaskAgents(w, t, agents)
}

func newTaskGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show a task: its steps, attempts, failure counts and history",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closeConn, err := g.dial()
			if err != nil {
				return err
			}
			defer closeConn()
			ctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			resp, err := c.GetTask(ctx, &reevev1.GetTaskRequest{Namespace: g.namespace, TaskId: args[0]})
			if err != nil {
				return err
			}
			return g.printTaskMarked(ctx, c, cmd.OutOrStdout(), resp.GetTask())
		},
	}
}

// defaultListLimit is how many tasks `task list` prints without --limit;
// maxListPage is the largest page a scheduler serves.
const (
	defaultListLimit = 100
	maxListPage      = 1000
)

func newTaskListCmd(g *globals) *cobra.Command {
	var (
		state, token, wf, prefix, view string
		labels                         []string
		createdAfter, createdBefore    string
		limit                          int32
		all                            bool
	)
	cmd := &cobra.Command{
		Use:   "list [--state STATE] [--workflow NAME] [--prefix P] [--created-after T] [--created-before T] [--view basic|full] [--limit N] [--page-token T] [--all]",
		Short: "List tasks of the namespace, newest first, optionally filtered",
		Long: `list prints the namespace's tasks newest first (by creation time): --limit
of them (default 100) when there are that many, and a page token to continue
from when there are more. The scheduler cuts each page at 2 MiB, so over
large tasks list follows the page tokens until it has --limit tasks. --all
follows them to the end, --limit tasks a page.

--view basic leaves out each task's input, history, step outputs and
workflow definition (the name and version stay); --view full has everything.
The default is basic for the table and full with -o json, whose fields are
those of the Task message either way.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := parseTaskState(state)
			if err != nil {
				return err
			}
			req := &reevev1.ListTasksRequest{Namespace: g.namespace, State: st, PageSize: limit, Workflow: wf, TaskIdPrefix: prefix}
			if req.Labels, err = parseLabels("--label", labels); err != nil {
				return err
			}
			switch view {
			case "":
				req.View = reevev1.TaskView_TASK_VIEW_BASIC
				if g.output == "json" {
					req.View = reevev1.TaskView_TASK_VIEW_FULL
				}
			case "basic":
				req.View = reevev1.TaskView_TASK_VIEW_BASIC
			case "full":
				req.View = reevev1.TaskView_TASK_VIEW_FULL
			default:
				return usagef("--view: want basic or full, got %q", view)
			}
			if err := parseTimeFlags(timeFlag{"--created-after", createdAfter, &req.CreatedAfter}, timeFlag{"--created-before", createdBefore, &req.CreatedBefore}); err != nil {
				return err
			}
			if limit < 0 || (all && limit > maxListPage) {
				return usagef("--limit: want 1 to %d tasks a page with --all, or a positive count, got %d", maxListPage, limit)
			}
			want := int(limit)
			if want == 0 {
				want = defaultListLimit
			}
			c, closeConn, err := g.dial()
			if err != nil {
				return err
			}
			defer closeConn()
			resp := &reevev1.ListTasksResponse{}
			for {
				ctx, cancel := g.requestCtx(cmd.Context())
				req.PageToken = token
				if !all {
					// Only what is missing: the last page's token then
					// continues right after the last task printed.
					req.PageSize = int32(min(want-len(resp.Tasks), maxListPage))
				}
				page, err := c.ListTasks(ctx, req)
				cancel()
				if err != nil {
					return err
				}
				resp.Tasks = append(resp.Tasks, page.GetTasks()...)
				resp.ArchivedTaskIds = append(resp.ArchivedTaskIds, page.GetArchivedTaskIds()...)
				resp.NextPageToken, token = page.GetNextPageToken(), page.GetNextPageToken()
				if token == "" || (!all && len(resp.Tasks) >= want) {
					break
				}
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			return printTaskList(cmd.OutOrStdout(), resp.GetTasks(), resp.GetNextPageToken())
		},
	}
	f := cmd.Flags()
	f.StringVar(&state, "state", "", "only tasks in this state (e.g. running, failed)")
	f.StringVar(&wf, "workflow", "", "only tasks of this workflow (exact name)")
	f.StringVar(&prefix, "prefix", "", "only tasks whose id starts with this")
	f.StringArrayVar(&labels, "label", nil, "only tasks with this label KEY=VALUE (repeatable: every one)")
	f.StringVar(&createdAfter, "created-after", "", "only tasks created at or after this RFC 3339 time")
	f.StringVar(&createdBefore, "created-before", "", "only tasks created before this RFC 3339 time")
	f.StringVar(&view, "view", "", "basic or full (default: basic, full with -o json)")
	f.Int32Var(&limit, "limit", 0, "tasks to print, following page tokens as needed (default 100); with --all, tasks per page (at most 1000)")
	f.StringVar(&token, "page-token", "", "continue from a previous page")
	f.BoolVar(&all, "all", false, "follow page tokens to the end")
	return cmd
}

func newTaskWatchCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "watch ID",
		Short: "Print a task on every change until it is terminal",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closeConn, err := g.dial()
			if err != nil {
				return err
			}
			defer closeConn()
			out := cmd.OutOrStdout()
			_, err = watchTask(cmd.Context(), c, g.namespace, args[0], func(t *reevev1.Task) error {
				if g.output == "json" {
					return printJSONLine(out, t)
				}
				return printTaskLine(out, t)
			})
			if cmd.Context().Err() != nil {
				return nil // interrupted by the user
			}
			return err
		},
	}
}

// printTaskLine prints one line per change: time, state, and each step's state.
func printTaskLine(w io.Writer, t *reevev1.Task) error {
	line := ts(t.GetUpdateTime()) + "  " + shortState(t.GetState(), "TASK_STATE_")
	for _, s := range t.GetSteps() {
		line += "  " + s.GetName() + "=" + shortState(s.GetState(), "STEP_STATE_")
		if s.GetAttempt() > 1 {
			line += "#" + itoa(s.GetAttempt())
		}
	}
	_, err := io.WriteString(w, line+"\n")
	return err
}

func newTaskCancelCmd(g *globals) *cobra.Command {
	var reason string
	var noCompensate bool
	cmd := &cobra.Command{
		Use:   "cancel ID [--reason TEXT] [--no-compensate]",
		Short: "Cancel a task: running steps are told to stop, pending ones never start, succeeded ones are undone",
		Long: `Cancel a task. Running steps are told to stop and pending ones never start.
Steps that succeeded and declare a compensation are undone, in reverse order,
and the task ends COMPENSATED (FAILED with an alert when an undo cannot be
done); with nothing to undo it ends CANCELED. A task that is already
compensating finishes its undo.

With --no-compensate the task ends CANCELED at once and nothing is undone;
'reeve task compensate ID' undoes it later, while it stays in etcd for the
retention.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closeConn, err := g.dial()
			if err != nil {
				return err
			}
			defer closeConn()
			ctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			resp, err := c.CancelTask(ctx, &reevev1.CancelTaskRequest{Namespace: g.namespace, TaskId: args[0], Reason: reason, NoCompensate: noCompensate})
			if err != nil {
				return err
			}
			return g.printTask(cmd.OutOrStdout(), resp.GetTask())
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the task's history")
	cmd.Flags().BoolVar(&noCompensate, "no-compensate", false, "end the task CANCELED at once without undoing its succeeded steps")
	return cmd
}
