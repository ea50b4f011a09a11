package main

import (
	"strconv"

	"github.com/spf13/cobra"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

func newWorkflowCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "workflow", Short: "Register and inspect workflow definitions"}
	cmd.AddCommand(newWorkflowRegisterCmd(g), newWorkflowGetCmd(g), newWorkflowListCmd(g))
	return cmd
}

func (g *globals) printWorkflow(cmd *cobra.Command, w *reevev1.Workflow) error {
	if g.output == "json" {
		return printJSON(cmd.OutOrStdout(), w)
	}
	return printWorkflow(cmd.OutOrStdout(), w)
}

func newWorkflowRegisterCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "register -f FILE",
		Short: "Register a new version of a workflow (a no-op if it equals the latest)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usagef("-f is required")
			}
			w, err := readWorkflowFile(file)
			if err != nil {
				return err
			}
			if w.GetNamespace() == "" {
				w.Namespace = g.namespace
			}
			c, closeConn, err := g.dial()
			if err != nil {
				return err
			}
			defer closeConn()
			ctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			resp, err := c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: w})
			if err != nil {
				return fileRefusal(err, file, "workflow")
			}
			if err := g.printWorkflow(cmd, resp.GetWorkflow()); err != nil {
				return err
			}
			// Best effort: a step type no agent serves now is worth a
			// warning, not a failure (its agents may start later).
			if agents, err := listAgents(ctx, c, resp.GetWorkflow().GetNamespace()); err == nil {
				warnUnserved(cmd.ErrOrStderr(), resp.GetWorkflow(), agents)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "workflow definition (.json or .yaml, protojson of reeve.v1.Workflow)")
	return cmd
}

func newWorkflowGetCmd(g *globals) *cobra.Command {
	var version int32
	cmd := &cobra.Command{
		Use:   "get NAME [--version N]",
		Short: "Show a workflow definition (the latest version by default)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closeConn, err := g.dial()
			if err != nil {
				return err
			}
			defer closeConn()
			ctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			resp, err := c.GetWorkflow(ctx, &reevev1.GetWorkflowRequest{Namespace: g.namespace, Name: args[0], Version: version})
			if err != nil {
				return err
			}
			return g.printWorkflow(cmd, resp.GetWorkflow())
		},
	}
	cmd.Flags().Int32Var(&version, "version", 0, "version (default: the latest)")
	return cmd
}

func newWorkflowListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the latest version of every workflow of the namespace",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closeConn, err := g.dial()
			if err != nil {
				return err
			}
			defer closeConn()
			resp := &reevev1.ListWorkflowsResponse{}
			token := ""
			for {
				ctx, cancel := g.requestCtx(cmd.Context())
				page, err := c.ListWorkflows(ctx, &reevev1.ListWorkflowsRequest{Namespace: g.namespace, PageToken: token})
				cancel()
				if err != nil {
					return err
				}
				resp.Workflows = append(resp.Workflows, page.GetWorkflows()...)
				if token = page.GetNextPageToken(); token == "" {
					break
				}
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			return printWorkflowList(cmd.OutOrStdout(), resp.GetWorkflows())
		},
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
