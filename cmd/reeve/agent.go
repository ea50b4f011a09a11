package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/chaos/workload"
	"github.com/reeve-org/reeve/internal/demo"
)

func newAgentCmd(g *globals) *cobra.Command {
	var (
		schedulers        []string
		id, sideEffects   string
		withDemo, asChaos bool
		maxConcurrent     int
		registerTimeout   time.Duration
		logs              logFlags
	)
	cmd := &cobra.Command{
		Use:   "agent --schedulers A,B (--demo | --chaos)",
		Short: "Run a built-in agent (--demo or --chaos), or list the connected agents (agent list)",
		Long: `agent has two uses:

  reeve agent --demo|--chaos   run a built-in agent in this process (below)
  reeve agent list             list the agents connected to any scheduler,
                               and the ready queues (also: reeve agents list)

agent --demo|--chaos runs one of Reeve's built-in agents in its own process,
connected to one scheduler of --schedulers at a time (it starts at a
scheduler picked by its --id, so several agents spread over the list, and
moves to the next one when its scheduler fails or drains). Before serving it registers the
workflows its handlers serve (idempotent: an identical definition is not
registered twice).

  --demo    the demo workflows of 'reeve dev --demo' (demo.orders, ...)
  --chaos   the chaos suite's workflows; every side effect is appended to
            --side-effects (one JSON line per execution, see docs/reliability.md),
            and the completion token of each chaos.hook step it defers to
            FILE.callbacks (mode 0600: tokens are secrets);
            chaos.wide (64 parallel steps) needs schedulers run with
            --etcd-max-txn-ops 204 or more, and etcd members with that --max-txn-ops
            (refused otherwise: the agent logs it and serves the others)

With the TLS flags (--tls-ca, --tls-cert, --tls-key, --token) it connects
like the client commands; registering workflows then needs the admin role,
and when refused the agent assumes an admin registered them and serves.

Stop it with SIGTERM or Ctrl-C: it finishes running steps first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger(cmd)
			if err != nil {
				return usageError{err}
			}
			if len(schedulers) == 0 {
				return usagef("--schedulers: required (or REEVE_SCHEDULERS)")
			}
			if withDemo == asChaos {
				return usagef("--demo or --chaos: exactly one is required")
			}
			if asChaos && sideEffects == "" {
				return usagef("--side-effects: required with --chaos")
			}
			if id == "" {
				host, _ := os.Hostname()
				id = fmt.Sprintf("%s-%d", host, os.Getpid())
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()

			workflows := demo.Workflows()
			var register func(*agentsdk.Agent)
			if withDemo {
				register = demo.Register
			} else {
				workflows = workload.Workflows()
				logFile, err := workload.OpenSideEffectLog(sideEffects)
				if err != nil {
					return err
				}
				defer logFile.Close() // after Run: handlers are done
				register = func(a *agentsdk.Agent) { workload.Register(a, logFile) }
			}
			tlsCfg, err := g.sec.tlsConfig()
			if err != nil {
				return err
			}
			addrs := rotate(schedulers, id)
			if err := registerWorkflows(ctx, log, g, addrs, workflows, registerTimeout); err != nil {
				return err
			}
			opts := []agentsdk.Option{agentsdk.WithAgentID(id), agentsdk.WithLogger(log.With("agent_id", id)),
				agentsdk.WithMaxConcurrentSteps(maxConcurrent), agentsdk.WithReconnectBackoff(50*time.Millisecond, 2*time.Second)}
			if tlsCfg != nil {
				opts = append(opts, agentsdk.WithTLS(tlsCfg))
			}
			if g.sec.token != "" {
				opts = append(opts, agentsdk.WithToken(g.sec.token))
			}
			agent, err := agentsdk.New(addrs, opts...)
			if err != nil {
				return err
			}
			register(agent)
			return agent.Run(ctx)
		},
	}
	cmd.Flags().StringSliceVar(&schedulers, "schedulers", envList("REEVE_SCHEDULERS"), "scheduler addresses, comma-separated (env REEVE_SCHEDULERS)")
	cmd.Flags().StringVar(&id, "id", "", "agent id, unique per process and kept across restarts of it (default <hostname>-<pid>)")
	// --tls, --tls-ca, --tls-cert, --tls-key and --token are the global client flags.
	cmd.Flags().BoolVar(&withDemo, "demo", false, "serve the demo workflows")
	cmd.Flags().BoolVar(&asChaos, "chaos", false, "serve the chaos suite's workflows")
	cmd.Flags().StringVar(&sideEffects, "side-effects", "", "append-only side-effect log (with --chaos)")
	cmd.Flags().IntVar(&maxConcurrent, "max-concurrent-steps", 16, "steps run at once")
	cmd.Flags().DurationVar(&registerTimeout, "register-timeout", time.Minute, "how long to keep trying to register the workflows")
	logs.register(cmd)
	cmd.AddCommand(newAgentListCmd(g))
	return cmd
}

// rotate starts addrs at a position picked by id, so that agents given the
// same list spread over it.
func rotate(addrs []string, id string) []string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	n := int(h.Sum32() % uint32(len(addrs)))
	return append(append([]string(nil), addrs[n:]...), addrs[:n]...)
}

// registerWorkflows registers ws through any scheduler of addrs, retrying
// unavailable ones until timeout. Without the right to (role checks on, not
// an admin) it leaves registration to an admin.
func registerWorkflows(ctx context.Context, log *slog.Logger, g *globals, addrs []string, ws []*reevev1.Workflow, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	to := *g // the global TLS and token flags, these addresses
	to.address = strings.Join(addrs, ",")
	c, closeConn, err := to.dial()
	if err != nil {
		return err
	}
	defer closeConn()
	for _, w := range ws {
		for {
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := c.RegisterWorkflow(rctx, &reevev1.RegisterWorkflowRequest{Workflow: w})
			rcancel()
			if err == nil {
				break
			}
			if status.Code(err) == codes.PermissionDenied {
				log.Warn("not allowed to register workflows (admin role); serving those an admin registered", "err", err)
				return nil
			}
			if status.Code(err) == codes.InvalidArgument {
				// Refused for good (e.g. chaos.wide against schedulers
				// without a raised --etcd-max-txn-ops): retrying cannot
				// help, and the other workflows still serve.
				log.Warn("workflow refused; not registered, tasks of it cannot be submitted", "workflow", w.GetName(), "err", err)
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("register workflow %s: %w", w.GetName(), errors.Join(err, ctx.Err()))
			}
			log.Warn("register workflow; retrying", "workflow", w.GetName(), "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return nil
}
