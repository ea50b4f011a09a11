package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// newTaskCompleteCmd is `reeve task complete`: a completion from outside
// of a step that waits (waitFor: external) or that its agent deferred.
func newTaskCompleteCmd(g *globals) *cobra.Command {
	var token, result, code, message string
	cmd := &cobra.Command{
		Use:   "complete (TASK_ID STEP | --token TOKEN) (--result JSON | --error CODE [--message TEXT])",
		Short: "Complete a waiting step from outside: with a result, or failed with an error (a rejection)",
		Long: `complete ends a step that waits for a completion from outside (waitFor:
external in its workflow) or that its agent handed off (deferred).

By name, TASK_ID STEP completes the step's current attempt; it needs the admin
or approver role of the namespace. With --token TOKEN (the step attempt's
completion token: an agent's, or 'reeve task token') no role is needed beyond
a connection: the token is the capability.

--result JSON: the step succeeded with that output (any JSON value), passed to
the steps after it. --error CODE [--message TEXT]: the step failed for good,
without retries (a decision from outside); its escalation applies, and a task
with compensations is undone.

The same completion sent again is answered as the first was ("repeated":
true) and changes nothing; another completion of a step already completed, or
of a step that does not wait (not ready yet, ended, a replaced attempt's
token), is refused (FAILED_PRECONDITION, reason STEP_COMPLETED_OTHERWISE or
STEP_NOT_WAITING).`,
		Example: `  reeve task complete order-42 approve --result '{"approved_by":"ann"}'
  reeve task complete order-42 approve --error rejected --message "over budget"
  reeve task complete --token rvt1.AbC... --result '{"status":"settled"}'`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case token != "" && len(args) != 0:
				return usagef("--token names the step: give no TASK_ID STEP with it")
			case token == "" && len(args) != 2:
				return usagef("want TASK_ID STEP, or --token TOKEN")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &reevev1.CompleteStepRequest{Token: token}
			if token == "" {
				req.Namespace, req.TaskId, req.Step = g.namespace, args[0], args[1]
			}
			switch {
			case cmd.Flags().Changed("result") == cmd.Flags().Changed("error"):
				return usagef("exactly one of --result or --error is required")
			case cmd.Flags().Changed("message") && !cmd.Flags().Changed("error"):
				return usagef("--message goes with --error")
			case cmd.Flags().Changed("result"):
				v := &structpb.Value{}
				if err := protojson.Unmarshal([]byte(result), v); err != nil {
					return usagef("--result: not valid JSON: %v", err)
				}
				req.Outcome = &reevev1.CompleteStepRequest_Output{Output: v}
			default:
				if code == "" {
					return usagef("--error: a code is required (e.g. rejected)")
				}
				req.Outcome = &reevev1.CompleteStepRequest_Error{Error: &reevev1.CompletionError{Code: code, Message: message}}
			}
			c, closeConn, err := g.dial()
			if err != nil {
				return err
			}
			defer closeConn()
			ctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			resp, err := c.CompleteStep(ctx, req)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			ref := resp.GetRef()
			what := "completed"
			if resp.GetRepeated() {
				what = "already completed (the same completion: nothing changed)"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "step %s of task %s (attempt %d) %s: %s\n", ref.GetStep(), ref.GetTaskId(), ref.GetAttempt(), what, shortState(resp.GetState(), "STEP_STATE_"))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&token, "token", "", "the step attempt's completion token (instead of TASK_ID STEP)")
	f.StringVar(&result, "result", "", "the step's output as JSON: it succeeded")
	f.StringVar(&code, "error", "", "an error code: the step failed for good (e.g. rejected)")
	f.StringVar(&message, "message", "", "with --error, the error's message")
	return cmd
}

// newTaskTokenCmd is `reeve task token`: the completion token of a waiting
// step, for the admin or approver role.
func newTaskTokenCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "token TASK_ID STEP",
		Short: "Print the completion token of a waiting step (a secret: whoever holds it may complete the step)",
		Long: `token prints the completion token of the current attempt of a step that waits
for a completion from outside (WAITING, or deferred by its agent), to pass on to
whoever will complete it ('reeve task complete --token'). It needs the admin or
approver role of the namespace. The token is a secret: do not log it.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closeConn, err := g.dial()
			if err != nil {
				return err
			}
			defer closeConn()
			ctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			resp, err := c.GetCompletionToken(ctx, &reevev1.GetCompletionTokenRequest{Namespace: g.namespace, TaskId: args[0], Step: args[1]})
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), resp.GetToken())
			return err
		},
	}
}

// newTaskWaitingCmd is `reeve task waiting`: the namespace's steps that
// wait for a completion from outside, oldest first.
func newTaskWaitingCmd(g *globals) *cobra.Command {
	var limit int32
	var all bool
	cmd := &cobra.Command{
		Use:   "waiting [--limit N] [--all]",
		Short: "List the steps waiting for a completion from outside (approvals, callbacks, deferred steps), oldest first",
		Long: `waiting lists the namespace's steps that wait for a completion from outside:
WAITING steps (waitFor: external) and steps their agent handed off (deferred),
oldest wait first, with since when and until when (complete-by). Complete one
with 'reeve task complete TASK_ID STEP'. Needs the client, approver or admin
role of the namespace.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closeConn, err := g.dial()
			if err != nil {
				return err
			}
			defer closeConn()
			out := &reevev1.ListWaitingStepsResponse{}
			token := ""
			for {
				ctx, cancel := g.requestCtx(cmd.Context())
				resp, err := c.ListWaitingSteps(ctx, &reevev1.ListWaitingStepsRequest{Namespace: g.namespace, PageSize: limit, PageToken: token})
				cancel()
				if err != nil {
					return err
				}
				out.Steps = append(out.Steps, resp.GetSteps()...)
				out.NextPageToken, token = resp.GetNextPageToken(), resp.GetNextPageToken()
				if !all || token == "" {
					break
				}
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "TASK\tSTEP\tATTEMPT\tWORKFLOW\tKIND\tSINCE\tCOMPLETE-BY")
			for _, w := range out.GetSteps() {
				kind := "external"
				if w.GetDeferred() {
					kind = "deferred"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", w.GetRef().GetTaskId(), w.GetRef().GetStep(), w.GetRef().GetAttempt(),
					orDash(w.GetWorkflow()), kind, ts(w.GetWaitStartTime()), ts(w.GetCompleteBy()))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if !all && out.GetNextPageToken() != "" {
				fmt.Fprintln(cmd.OutOrStdout(), "(more: --all)")
			}
			return nil
		},
	}
	cmd.Flags().Int32Var(&limit, "limit", 100, "steps per page (at most 1000)")
	cmd.Flags().BoolVar(&all, "all", false, "follow the pages to the end")
	return cmd
}
