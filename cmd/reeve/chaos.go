package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/reeve-org/reeve/internal/chaos"
)

func newChaosCmd() *cobra.Command {
	var (
		cfg                        chaos.Config
		dir, etcdBin, toxiproxyBin string
		jsonPath                   string
	)
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Run the chaos suite: a load under process kills and network faults, then an invariant check",
		Long: `chaos starts a local cluster as separate processes (3 etcd members, 2
schedulers, 2 supervisors, --agents chaos agents; agents reach schedulers and
schedulers and supervisors reach etcd through toxiproxy), submits --tasks
saga tasks (a → b → c, each with a compensation; --fail-share of them fail for
good at a random step and compensate) at --rate per second, and meanwhile
injects a fault every ~--fault-every: SIGKILL and restart of a scheduler,
supervisor, agent or etcd member (one member at a time: never quorum), or a
toxic (latency, reset_peer, timeout, bandwidth) on one link. The --seed
(printed) fixes the fault schedule and the tasks' behaviour.

Operators act at random points: 5% of the tasks are canceled, 5% compensated,
and 5% run a variant escalating to fail whose step fails for good in its first
round only: the task ends FAILED with an alert and an operator retries the
failed step (RetryStep), also at wrong points (while the task runs, on a step
that is not FAILED, after it SUCCEEDED: those must be refused); a retried task
must end SUCCEEDED. --wide-tasks of the tasks run a wide workflow (64 parallel
steps, every other one compensable, and a compensable join), so the etcd
members run with --max-txn-ops 512 and the schedulers are told so.

When the load has drained it checks, from etcd and the agents' side-effect
logs: every task terminal; no result accepted twice; every side effect
attributable to a current or superseded attempt of an existing step; every
COMPENSATED task's succeeded steps compensated exactly once in reverse order;
no dispatched step without a deadline at any sample; one supervisor action per
expired execution; an operator retry only of a FAILED task; nothing undone that
never succeeded; an accepted attempt's side effect logged once; every FAILED
task alerted; then the store checks of 'reeve verify'; with --secure (etcd,
schedulers, supervisors, agents and the operators over mutual TLS with role
checks), no call of a component refused by the role checks. The wide tasks' history
(more than a record keeps) is put together from a watch of their records. It prints a table, writes --json, and exits 1 on any
violation. See docs/reliability.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return err
			}
			if cfg.Etcd, err = exec.LookPath(etcdBin); err != nil {
				return usagef("--etcd-bin: %v (run 'make etcd')", err)
			}
			if cfg.Toxiproxy, err = exec.LookPath(toxiproxyBin); err != nil {
				return usagef("--toxiproxy-bin: %v (run 'make toxiproxy')", err)
			}
			cfg.Reeve = self
			if cfg.Dir = dir; cfg.Dir == "" {
				if cfg.Dir, err = os.MkdirTemp("", "reeve-chaos-"); err != nil {
					return err
				}
			}
			cfg.Log = cmd.ErrOrStderr()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := chaos.Run(ctx, cfg)
			if err != nil {
				return err
			}
			if err := rep.WriteTable(cmd.OutOrStdout(), 30); err != nil {
				return err
			}
			if jsonPath != "" {
				if err := rep.WriteJSON(jsonPath); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "report written to %s\n", jsonPath)
			}
			if !rep.OK() {
				fmt.Fprintf(cmd.ErrOrStderr(), "reeve chaos: %d invariant violations (seed %d; logs in %s)\n", len(rep.Violations), rep.Seed, cfg.Dir)
				return exitCodeError{exitError}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&cfg.Seed, "seed", 0, "seed of the fault schedule and task behaviour; 0 picks one (printed)")
	f.IntVar(&cfg.Tasks, "tasks", 2000, "tasks to submit")
	f.Float64Var(&cfg.FailShare, "fail-share", 0.2, "share of tasks designed to fail for good and compensate")
	f.IntVar(&cfg.WideTasks, "wide-tasks", 20, "tasks (of --tasks) running the wide workflow, spread over the run; negative: none")
	f.IntVar(&cfg.TransientPerMille, "transient-per-mille", 50, "attempts that fail transiently, per mille")
	f.Float64Var(&cfg.Rate, "rate", 25, "tasks submitted per second; faults are injected while submitting")
	f.DurationVar(&cfg.FaultEvery, "fault-every", 1500*time.Millisecond, "mean time between faults")
	f.IntVar(&cfg.Agents, "agents", 4, "agent processes")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", 5*time.Minute, "how long the load may take to drain after the last fault")
	f.DurationVar(&cfg.OverdueWindow, "overdue-window", 30*time.Second, "how far past its complete-by a dispatched step may be at a sample")
	f.StringVar(&dir, "dir", "", "directory for data, logs and side-effect logs (default a new temporary directory, kept)")
	f.StringVar(&etcdBin, "etcd-bin", "etcd", "etcd server binary (make etcd)")
	f.StringVar(&toxiproxyBin, "toxiproxy-bin", "toxiproxy-server", "toxiproxy server binary (make toxiproxy)")
	f.StringVar(&jsonPath, "json", "chaos-report.json", "where to write the JSON report; empty: not written")
	f.BoolVar(&cfg.Secure, "secure", false, "run the cluster over mutual TLS with role checks (as 'reeve cluster --secure'); a call of a component refused by them is a violation")
	f.StringVar(&cfg.ArchiveDSN, "archive-dsn", "", "a PostgreSQL database the schedulers archive finished tasks to (2 s after they end), checked for every task as etcd is")
	return cmd
}
