package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// The queue commands (flow control per step type, issue 36):
// reeve.v1.QueueService.

func newQueueCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "queue", Short: "Limits and pauses per step type (docs/architecture.md, Flow control)"}
	cmd.AddCommand(newQueueLimitCmd(g), newQueueListCmd(g), newQueuePauseCmd(g, true), newQueuePauseCmd(g, false))
	return cmd
}

// queueCall dials, runs one call bounded by --timeout, and prints the
// config it returns.
func (g *globals) queueCall(cmd *cobra.Command, typ string, call func(c reevev1.QueueServiceClient, ctx context.Context) (*reevev1.QueueConfig, error)) error {
	cc, err := g.connect()
	if err != nil {
		return err
	}
	defer func() { _ = cc.Close() }()
	ctx, cancel := g.requestCtx(cmd.Context())
	defer cancel()
	cfg, err := call(reevev1.NewQueueServiceClient(cc), ctx)
	if err != nil {
		return err
	}
	if g.output == "json" {
		return printJSON(cmd.OutOrStdout(), cfg)
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: max-running %s, rate %s, paused %t\n", typ,
		limitText(cfg.GetMaxRunning()), rateText(cfg), cfg.GetPaused())
	return err
}

func newQueueLimitCmd(g *globals) *cobra.Command {
	var (
		maxRunning, burst int32
		rate              float64
		clearAll          bool
	)
	cmd := &cobra.Command{
		Use:   "limit TYPE (--max-running N | --rate R [--burst B] | --clear)",
		Short: "Set the limits of a step type: attempts running at once and started per second, cluster-wide",
		Long: `Set the limits of a step type of the namespace (admin role). --max-running:
attempts of the type running at once, cluster-wide; --rate: attempts started
per second, with --burst of them at once (1 when not given). A limit not
given is removed; --clear removes every limit. The pause state is kept.
Every scheduler applies a change within a second; lowering --max-running
below the running count lets running attempts finish and starts none until
under the limit.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if clearAll && (maxRunning != 0 || rate != 0 || burst != 0) {
				return usagef("--clear takes no other limit")
			}
			if !clearAll && maxRunning == 0 && rate == 0 {
				return usagef("give --max-running, --rate or --clear")
			}
			return g.queueCall(cmd, args[0], func(c reevev1.QueueServiceClient, ctx context.Context) (*reevev1.QueueConfig, error) {
				resp, err := c.SetQueueLimit(ctx, &reevev1.SetQueueLimitRequest{Namespace: g.namespace, Type: args[0],
					MaxRunning: maxRunning, Rate: rate, Burst: burst, Clear: clearAll})
				return resp.GetConfig(), err
			})
		},
	}
	cmd.Flags().Int32Var(&maxRunning, "max-running", 0, "attempts running at once, cluster-wide (0: no limit)")
	cmd.Flags().Float64Var(&rate, "rate", 0, "attempts started per second, cluster-wide (0: no limit)")
	cmd.Flags().Int32Var(&burst, "burst", 0, "attempts that may start at once above the rate (1 when 0)")
	cmd.Flags().BoolVar(&clearAll, "clear", false, "remove every limit of the type")
	return cmd
}

func newQueuePauseCmd(g *globals, pause bool) *cobra.Command {
	use, short := "pause TYPE", "Dispatch nothing of a step type: its steps stay queued (running ones run on)"
	if !pause {
		use, short = "resume TYPE", "Dispatch a paused step type again"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.queueCall(cmd, args[0], func(c reevev1.QueueServiceClient, ctx context.Context) (*reevev1.QueueConfig, error) {
				if pause {
					resp, err := c.PauseQueue(ctx, &reevev1.PauseQueueRequest{Namespace: g.namespace, Type: args[0]})
					return resp.GetConfig(), err
				}
				resp, err := c.ResumeQueue(ctx, &reevev1.ResumeQueueRequest{Namespace: g.namespace, Type: args[0]})
				return resp.GetConfig(), err
			})
		},
	}
}

func newQueueListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the step types with a limit, a pause, queued steps or a connected agent",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cc, err := g.connect()
			if err != nil {
				return err
			}
			defer func() { _ = cc.Close() }()
			ctx, cancel := g.requestCtx(cmd.Context())
			defer cancel()
			resp, err := reevev1.NewQueueServiceClient(cc).ListQueues(ctx, &reevev1.ListQueuesRequest{Namespace: g.namespace})
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			return printQueues(cmd.OutOrStdout(), resp.GetQueues())
		},
	}
}

func printQueues(w io.Writer, qs []*reevev1.Queue) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tQUEUED\tRUNNING\tLIMIT\tRATE\tPAUSED\tOLDEST WAIT\tAGENTS")
	for _, q := range qs {
		running := "-"
		if q.GetRunningCounted() {
			running = strconv.FormatInt(q.GetRunning(), 10)
		}
		wait := "-"
		if q.GetQueued() > 0 {
			wait = q.GetOldestWait().AsDuration().Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%t\t%s\t%d\n", q.GetType(), q.GetQueued(), running,
			limitText(q.GetConfig().GetMaxRunning()), rateText(q.GetConfig()), q.GetConfig().GetPaused(), wait, q.GetAgents())
	}
	return tw.Flush()
}

func limitText(n int32) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(int(n))
}

func rateText(cfg *reevev1.QueueConfig) string {
	if cfg.GetRate() == 0 {
		return "-"
	}
	return fmt.Sprintf("%g/s burst %d", cfg.GetRate(), cfg.GetBurst())
}
