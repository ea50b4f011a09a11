package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// newAgentsCmd is "reeve agents", whose only subcommand is "list", the
// same command as "reeve agent list".
func newAgentsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "agents", Short: "List the connected agents (agents list, the same as agent list)"}
	cmd.AddCommand(newAgentListCmd(g))
	return cmd
}

func newAgentListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the agents connected to any scheduler, and the ready queues",
		Long: `list prints every agent of the namespace connected to any scheduler of the
cluster (id, step types, in flight / max, credits, connected since, its
scheduler), then the ready queue of every step type an agent serves or that
has queued steps: its depth and how long its head has waited.

In-flight counts of agents on other schedulers than the one answering are
published every 2 seconds, so they can be that old.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closeConn, err := g.dial()
			if err != nil {
				return err
			}
			defer closeConn()
			ctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			// Every page; the queues come with the first.
			req := &reevev1.ListAgentsRequest{Namespace: g.namespace, PageSize: 1000}
			resp, err := c.ListAgents(ctx, req)
			for err == nil && resp.GetNextPageToken() != "" {
				req.PageToken = resp.GetNextPageToken()
				var next *reevev1.ListAgentsResponse
				if next, err = c.ListAgents(ctx, req); err == nil {
					resp.Agents, resp.NextPageToken = append(resp.Agents, next.GetAgents()...), next.GetNextPageToken()
				}
			}
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			return printAgentList(cmd.OutOrStdout(), resp, time.Now())
		},
	}
}

func printAgentList(w io.Writer, resp *reevev1.ListAgentsResponse, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tSTEP TYPES\tIN FLIGHT\tCREDITS\tCONNECTED SINCE\tSCHEDULER")
	for _, a := range resp.GetAgents() {
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d\t%s\t%s\n", a.GetAgentId(), strings.Join(a.GetStepTypes(), ","),
			a.GetInFlight(), a.GetMaxConcurrentSteps(), a.GetCredits(), ts(a.GetConnectedSince()), a.GetSchedulerId())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP TYPE\tQUEUED\tOLDEST WAITING")
	for _, q := range resp.GetQueues() {
		oldest := "-"
		if t := q.GetOldestReadyTime(); t != nil {
			oldest = now.Sub(t.AsTime()).Truncate(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", q.GetStepType(), q.GetDepth(), oldest)
	}
	return tw.Flush()
}
