package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reeve-org/reeve/internal/bench"
	"github.com/reeve-org/reeve/internal/dial"
)

func newBenchCmd(g *globals) *cobra.Command {
	var (
		cfg            bench.Config
		rawEtcd        int
		recovery       bool
		reservePerStep int64
		reclaimEvery   time.Duration
		prof           pprofFlag
		gcf            perfFlags
		fo             failoverFlags
		etcdSec        etcdSecurity
		overload       overloadFlags
		compare        bool
		verbose        bool
	)
	cmd := &cobra.Command{
		Use:   "bench [--embedded | --address ADDR[,ADDR...] --etcd-endpoints URLS] [--tasks N] [--concurrency C | --rate R] [--steps S] [--shape sequential|fanout] | --embedded --recovery [--tasks N] | --failover [--etcd-bin PATH] [--rounds N] [--session-ttl S]",
		Short: "Measure throughput and latency of no-op tasks end to end",
		Long: `bench submits --tasks tasks of a no-op workflow (closed loop with --concurrency
tasks in flight, or open loop at --rate tasks/s), serves them with --agents no-op
agent connections, and reports completed tasks/s, submit-to-completed latency
percentiles (for the whole run and for each 5 s window), queue wait, dispatch
latency and etcd writes per task: raft entries (transactions), write-ahead
log bytes, operations (puts + deletes) and key+value bytes put, as one etcd
member's metrics count them (a running target's: its leader's /metrics). --embedded runs etcd (fsync on) and a scheduler in this process; its CPU
and peak RSS figures, allocations per task and GC share cover the whole
process, load generator included. The run
stops by itself after --tasks or --max-duration. The embedded
system includes a supervisor.

Without --embedded it loads running schedulers: --address is one or several
comma-separated (submissions round-robin, agents spread over them), secured
by the global --tls-* and --token flags (the identity needs the client and
agent roles, and admin to register the bench workflow); --etcd-endpoints and
the --etcd-* flags reach their etcd.

--recovery (with --embedded) measures recovery instead: for each scenario a
fresh etcd, scheduler and supervisor; --tasks one-step tasks are all taken by
one agent that then fails — "silent" (it never answers; steps are recovered
after their complete-by) and "killed" (its steps declare a 1 s heartbeat
timeout; it heartbeats once, then its connection drops) — and a healthy agent
completes what is re-dispatched. It reports, per scenario, re-dispatch latency
percentiles from each step's deadline to its re-dispatch, the time from the
first deadline to the last task done, and lost and stuck tasks.

Submissions refused with RESOURCE_EXHAUSTED (overload shedding, limits) are
counted apart from errors, by reason, with the latency of the refusing call;
open loop drops a refused task, a closed-loop submitter waits the refusal's
retry delay and sends it again, and the latency figures are of admitted
submissions only.
--overload-target, --overload-interval, --overload-agent-queues and
--overload-cpu-target configure the embedded scheduler's shedding (target 0:
off; a flood check, --quota-bytes, runs without it unless --overload-target
is given).

--quota-bytes N (with --embedded) gives the embedded etcd that space quota
and makes the run a flood check: RESOURCE_EXHAUSTED refusals are counted, not
errors, and the report adds accepted, refused, completed and lost tasks,
whether etcd raised NOSPACE and the peak database size over the quota.

--archive-dsn DSN runs with the archive of finished tasks: embedded, the
scheduler moves ended tasks there after --archive-grace (sqlite:PATH,
postgres://…, or pg: a throwaway PostgreSQL server for the run); the report
adds the tasks archived and the archive's bytes per task, etcd's tasks and
space in use at the end, and a lost check (every acknowledged task looked
up in etcd, then the archive; --verify-lost does it without an archive).
--archive-compare runs the load without and then with the archive, each on
a fresh etcd, and reports both with the on/off ratios.

--failover measures failover times on a local cluster of separate processes
(as 'reeve cluster': --etcd-bin, 3 etcd members, 2 schedulers, 2 supervisors
with --session-ttl, a demo agent and 3 chaos agents), --rounds times each:
the supervisor leader is SIGKILLed while first attempts of demo.timeout
tasks hang (they expire with no leader; reported: kill to the first
recovery by the standby, target TTL + 500 ms), then the scheduler most
agents are connected to is SIGKILLed while their steps run (reported: kill
to every moved agent having a result accepted through the other scheduler,
target 2 s), then an agent running heartbeat steps (1 s heartbeat timeout)
is cut off for good as its scheduler is SIGKILLed (reported: kill to the
supervisor's AGENT_LOST decision and to the steps' re-dispatch on a healthy
agent; the issue's target is heartbeat timeout + 200 ms).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fo.on {
				return runFailoverBench(cmd, g, fo)
			}
			for _, name := range []string{"etcd-ca", "etcd-cert", "etcd-key", "etcd-username", "etcd-password"} {
				if cmd.Flags().Changed(name) && cfg.Embedded {
					return usagef("--%s: only for a running target (--address and --etcd-endpoints); the embedded etcd is this process's", name)
				}
			}
			if !cfg.Embedded {
				cfg.Schedulers = g.sec.dialConfig(g.address)
				if _, err := dial.Addresses(g.address); err != nil {
					return dialUsage(err, "--address")
				}
				if _, err := cfg.Schedulers.TLSConfig(); err != nil {
					return dialUsage(err, "--address")
				}
				var ec clientv3.Config
				if err := etcdSec.apply(&ec); err != nil {
					return err
				}
				cfg.EtcdTLS, cfg.EtcdUsername, cfg.EtcdPassword = ec.TLS, ec.Username, ec.Password
			}
			if d := cfg.Duration + 2*time.Minute; cfg.Duration > 0 && cfg.MaxDuration < d && !cmd.Flags().Changed("max-duration") {
				cfg.MaxDuration = d // room for a sustained run to drain
			}
			if err := checkBenchFlags(cfg, rawEtcd); err != nil {
				return err
			}
			if err := checkSpaceFlags(cmd, cfg, reservePerStep, reclaimEvery); err != nil {
				return err
			}
			if err := overload.check(); err != nil {
				return err
			}
			cfg.OverloadTarget, cfg.OverloadInterval, cfg.OverloadCPU, cfg.OverloadAgentQueues = overload.target, overload.interval, overload.cpu, overload.agents
			if overload.target == 0 || (cfg.QuotaBytes > 0 && !cmd.Flags().Changed("overload-target")) {
				// Off; a flood check tests the space admission, which
				// shedding would otherwise pre-empt.
				cfg.OverloadTarget = -1
			}
			if err := checkArchiveFlags(cmd, cfg, compare, recovery, rawEtcd); err != nil {
				return err
			}
			cfg.SpaceReservePerStep, cfg.SpaceReclaim = reservePerStep, reclaimEvery
			if reservePerStep == 0 {
				cfg.SpaceReservePerStep = -1 // none
			}
			if reclaimEvery == 0 {
				cfg.SpaceReclaim = -1 // off
			}
			if _, _, err := gcf.apply(cmd); err != nil {
				return err
			}
			cfg.CommitWindow = gcf.window
			gcf.compressWithArchive(cmd, cfg.ArchiveDSN != "")
			cfg.RecordCompression = gcf.compress
			if gcf.window == 0 {
				cfg.CommitWindow = -1 // off
			}
			// Profiles of an embedded run cover etcd, the scheduler and the
			// load generator: they share this process.
			profAddr, stopProf, err := prof.start(cmd.Context(), slog.New(slog.DiscardHandler))
			if err != nil {
				return err
			}
			defer stopProf()
			if profAddr != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "reeve bench: pprof on http://%s/debug/pprof/\n", profAddr)
			}
			if recovery {
				return runRecoveryBench(cmd, g, cfg)
			}
			if rawEtcd > 0 {
				raw, err := bench.RawEtcd(cmd.Context(), cfg, rawEtcd)
				if err != nil {
					return err
				}
				if g.output == "json" {
					b, _ := json.Marshal(raw)
					_, err = fmt.Fprintln(cmd.OutOrStdout(), string(b))
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "raw etcd: %d txns (1 compare, 2 puts, 1 delete) from %d clients in %.2fs: %.0f txns/s\n", raw.Txns, raw.Concurrency, raw.DurationSec, raw.TxnsPerSec)
				return err
			}
			if verbose {
				cfg.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			}
			if compare {
				c, err := bench.RunCompare(cmd.Context(), cfg)
				if err != nil {
					return err
				}
				if g.output == "json" {
					return printJSONObject(cmd.OutOrStdout(), c)
				}
				return printCompare(cmd.OutOrStdout(), c)
			}
			rep, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.output == "json" {
				return printJSONObject(out, rep)
			}
			return printBenchReport(out, rep, cfg.ServerPID)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&cfg.Embedded, "embedded", false, "run etcd and a scheduler in this process")
	f.StringVar(&cfg.DataDir, "data-dir", "", "embedded etcd data directory (default: a temporary one)")
	f.BoolVar(&cfg.NoFsync, "no-fsync", false, "embedded etcd without fsync (measures the CPU path only)")
	f.StringSliceVar(&cfg.EtcdEndpoints, "etcd-endpoints", envList("REEVE_ETCD_ENDPOINTS"), "etcd of the running target (to see completions and count writes)")
	f.IntVar(&cfg.Tasks, "tasks", 1000, "tasks to complete")
	f.DurationVar(&cfg.Duration, "duration", 0, "stop submitting after this long (or after --tasks, whichever comes first), e.g. 60s for a sustained run")
	f.IntVar(&cfg.ServerPID, "server-pid", 0, "process id of the running target, to report its CPU seconds and peak RSS (Linux /proc)")
	f.IntVar(&cfg.Concurrency, "concurrency", 64, "closed loop: tasks in flight")
	f.Float64Var(&cfg.Rate, "rate", 0, "open loop: tasks submitted per second (0: closed loop)")
	f.IntVar(&cfg.Steps, "steps", 1, "steps per task")
	f.StringVar(&cfg.Shape, "shape", "sequential", "sequential (a chain) or fanout (one root, the rest in parallel)")
	f.IntVar(&cfg.Agents, "agents", 2, "agent connections")
	f.IntVar(&cfg.AgentConcurrency, "agent-concurrency", 512, "max concurrent steps per agent")
	f.IntVar(&cfg.MaxRunning, "max-running", 0, "a max_running limit on the bench's step type, set before the run (0: none; needs the admin role)")
	f.DurationVar(&cfg.Work, "work", 0, "how long each agent handler holds its step (0: no-op)")
	f.DurationVar(&cfg.Retention, "retention", 0, "embedded: retention of terminal tasks (default 72h)")
	f.BoolVar(&recovery, "recovery", false, "measure recovery of expired steps (silent and killed agent scenarios; needs --embedded; --tasks at most 10000)")
	f.IntVar(&rawEtcd, "raw-etcd", 0, "instead, run this many raw etcd transactions shaped like a task transition (--concurrency clients, embedded etcd)")
	f.DurationVar(&cfg.MaxDuration, "max-duration", 5*time.Minute, "stop after this long whatever happened (--duration + 2m when that is longer and the flag is not given)")
	f.Int64Var(&cfg.QuotaBytes, "quota-bytes", 0, "embedded: etcd's space quota in bytes, and a flood check: RESOURCE_EXHAUSTED refusals are counted, and the report adds accepted, refused, completed and lost tasks, NOSPACE and the peak database size over the quota (0: etcd's default 2 GiB, no flood report)")
	f.Int64Var(&reservePerStep, "space-reserve-per-step", 4<<10, "embedded: the scheduler's --space-reserve-per-step (etcd bytes reserved per execution in flight; 0: none)")
	f.DurationVar(&cfg.SpaceCheckInterval, "space-check-interval", 5*time.Second, "embedded: how often the scheduler reads etcd's space and alarms")
	f.DurationVar(&reclaimEvery, "space-reclaim-interval", time.Minute, "embedded: the scheduler's --space-reclaim-interval (0: never reclaims by itself)")
	overload.register(f)
	f.StringVar(&cfg.RecoveryCPUProfile, "recovery-cpuprofile", "", "with --recovery: write a CPU profile of each scenario's recovery (from the healthy agent's connection to the end) to FILE.silent and FILE.killed")
	f.StringVar(&cfg.ArchiveDSN, "archive-dsn", "", "archive of finished tasks: embedded, the scheduler moves ended tasks there after --archive-grace; a running target's own --archive-dsn is only read (archive figures, the lost check). postgres://…, sqlite:PATH, or "+bench.ArchivePG+"[?PARAMS] (embedded): a throwaway PostgreSQL server in a temporary directory for the run, PARAMS added to its DSN, e.g. pg?pool_max_conns=32 (default: none)")
	f.DurationVar(&cfg.ArchiveGrace, "archive-grace", 30*time.Second, "embedded, with --archive-dsn: how long an ended task stays in etcd before it moves to the archive")
	f.DurationVar(&cfg.ArchiveRetention, "archive-retention", 30*24*time.Hour, "embedded, with --archive-dsn: how long the archive keeps a task after it ended")
	f.DurationVar(&cfg.ArchiveInterval, "archive-interval", 5*time.Second, "embedded, with --archive-dsn: how often the scheduler moves tasks past their grace")
	f.DurationVar(&cfg.ArchiveWait, "archive-wait", 0, "with --archive-dsn: after the load, wait up to this long until etcd holds no task (all moved to the archive) before the archive and etcd figures are read (0: no wait)")
	f.BoolVar(&compare, "archive-compare", false, "embedded, with --archive-dsn: run the load twice, on a fresh etcd each, without and then with the archive, and report both side by side with the on/off ratios of throughput, p50 and p99")
	f.BoolVar(&cfg.VerifyLost, "verify-lost", false, fmt.Sprintf("after the load, check that every task whose submission was acknowledged exists in etcd or the archive (all up to %d, else a random %d); always on with --archive-dsn", bench.LostCheckAll, bench.LostSample))
	f.BoolVar(&verbose, "verbose", false, "print the warnings and errors of the embedded scheduler, supervisor and agents on stderr")
	fo.register(f)
	etcdSec.register(cmd, g.getenv)
	prof.register(cmd)
	gcf.register(cmd, g.getenv, 400, false)
	return cmd
}

// printBenchReport writes one run's report as text.
func printBenchReport(out io.Writer, rep *bench.Report, serverPID int) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "mode\t%s\n", rep.Mode)
	fmt.Fprintf(tw, "workload\t%d tasks × %d steps (%s), concurrency %d, rate %.0f/s, %d agents\n", rep.Tasks, rep.Steps, rep.Shape, rep.Concurrency, rep.Rate, rep.Agents)
	fmt.Fprintf(tw, "completed\t%d (%d not succeeded) in %.2fs\n", rep.Completed, rep.Failed, rep.DurationSec)
	if rep.AgentsStopped > 0 {
		fmt.Fprintf(tw, "agents stopped\t%d; first: %s\n", rep.AgentsStopped, rep.AgentError)
	}
	if rep.Errors > 0 {
		fmt.Fprintf(tw, "errors\t%d; first: %s\n", rep.Errors, rep.FirstError)
	}
	if rep.Refused > 0 {
		fmt.Fprintf(tw, "refused\t%d of %d submissions (RESOURCE_EXHAUSTED: %v), in p50 %.2f ms  p99 %.2f ms\n",
			rep.Refused, rep.Refused+rep.Accepted, rep.RefusedReasons, rep.RefusalP50Ms, rep.RefusalP99Ms)
	}
	fmt.Fprintf(tw, "throughput\t%.0f tasks/s\n", rep.TasksPerSec)
	fmt.Fprintf(tw, "submit→completed\tp50 %.1f ms  p95 %.1f ms  p99 %.1f ms  max %.1f ms\n", rep.P50Ms, rep.P95Ms, rep.P99Ms, rep.MaxMs)
	fmt.Fprintf(tw, "queue wait\tp50 %.2f ms  p99 %.2f ms\n", rep.QueueWaitP50Ms, rep.QueueWaitP99Ms)
	fmt.Fprintf(tw, "dispatch latency\tp50 %.2f ms  p99 %.2f ms\n", rep.DispatchP50Ms, rep.DispatchP99Ms)
	fmt.Fprintf(tw, "etcd txns per task\t%.2f\n", rep.EtcdTxnsPerTask)
	fmt.Fprintf(tw, "etcd writes per task\t%.0f WAL bytes, %.2f ops (puts + deletes), %.0f key+value bytes put (one member)\n", rep.EtcdBytesPerTask, rep.EtcdOpsPerTask, rep.EtcdPutBytesPerTask)
	if rep.EtcdDBMaxMB > 0 {
		fmt.Fprintf(tw, "etcd db size\tstart %.1f MB  max %.1f MB  end %.1f MB; in use every 10s: %v MB\n", rep.EtcdDBStartMB, rep.EtcdDBMaxMB, rep.EtcdDBEndMB, rep.EtcdDBInUseMB)
	}
	if rep.Mode == "embedded" {
		fmt.Fprintf(tw, "process CPU\t%.1f s (%.0f µs per task)\n", rep.ProcessCPUSec, rep.ProcessCPUSec/float64(max(1, rep.Completed))*1e6)
		fmt.Fprintf(tw, "process peak RSS\t%.0f MB\n", rep.ProcessPeakRSSMB)
		fmt.Fprintf(tw, "allocations per task\t%.0f (%.0f bytes)\n", rep.AllocsPerTask, rep.AllocBytesPerTask)
		if rep.GCCPUFraction != nil {
			fmt.Fprintf(tw, "GC\t%.1f %% of Go CPU, %d cycles\n", *rep.GCCPUFraction*100, rep.GCCycles)
		}
	}
	if fl := rep.Flood; fl != nil {
		fmt.Fprintf(tw, "flood\t%d accepted, %d refused (RESOURCE_EXHAUSTED), %d completed, %d lost\n", fl.Accepted, fl.Refused, fl.Completed, fl.Lost)
		fmt.Fprintf(tw, "etcd quota\t%.1f MiB; peak database file %.1f %%, in use %.1f %%; NOSPACE raised %v, at the end %v\n",
			float64(fl.QuotaBytes)/(1<<20), fl.PeakDBFraction*100, fl.PeakInUseFraction*100, fl.NoSpaceRaised, fl.NoSpaceAtEnd)
	}
	printArchive(tw, rep)
	printWindows(tw, rep.Windows)
	if serverPID > 0 {
		fmt.Fprintf(tw, "server CPU\t%.1f s (%.0f µs per task)\n", rep.ServerCPUSec, rep.ServerCPUSec/float64(max(1, rep.Completed))*1e6)
		fmt.Fprintf(tw, "server peak RSS\t%.0f MB\n", rep.ServerPeakRSSMB)
	}
	return tw.Flush()
}

// printArchive prints the archive, etcd-at-the-end and lost-check lines.
func printArchive(w io.Writer, rep *bench.Report) {
	if rep.Archive {
		fmt.Fprintf(w, "archive\t%s: %d tasks archived, %.0f bytes per task", rep.ArchiveDSN, rep.ArchiveTasks, rep.ArchiveBytesPerTask)
		if rep.ArchiveWaitSec > 0 {
			fmt.Fprintf(w, " (waited %.1f s after the load)", rep.ArchiveWaitSec)
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintf(w, "archive\toff\n")
	}
	fmt.Fprintf(w, "etcd at the end\t%d tasks, %.1f MB in use (%.0f bytes per task)\n", rep.EtcdTasksAtEnd, rep.EtcdDBInUseEndMB, rep.EtcdInUseBytesPerTask)
	if rep.LostChecked > 0 {
		fmt.Fprintf(w, "lost\t%d of %d acknowledged tasks checked (%s)", rep.Lost, rep.LostChecked, rep.LostSample)
		if rep.FirstLost != "" {
			fmt.Fprintf(w, "; first: %s", rep.FirstLost)
		}
		fmt.Fprintln(w)
	}
}

// printCompare writes the two runs of --archive-compare side by side.
func printCompare(out io.Writer, c *bench.CompareReport) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	off, on := c.Off, c.On
	fmt.Fprintf(tw, "workload\t%d tasks × %d steps (%s), concurrency %d, rate %.0f/s, %d agents\n", on.Tasks, on.Steps, on.Shape, on.Concurrency, on.Rate, on.Agents)
	fmt.Fprintf(tw, "\tarchive off\tarchive on (%s)\ton / off\n", on.ArchiveDSN)
	row := func(name, format string, a, b, ratio float64) {
		r := ""
		if ratio > 0 {
			r = fmt.Sprintf("%.3f", ratio)
		}
		fmt.Fprintf(tw, "%s\t"+format+"\t"+format+"\t%s\n", name, a, b, r)
	}
	row("completed", "%.0f", float64(off.Completed), float64(on.Completed), 0)
	row("errors", "%.0f", float64(off.Errors), float64(on.Errors), 0)
	row("throughput (tasks/s)", "%.0f", off.TasksPerSec, on.TasksPerSec, c.Ratio.TasksPerSec)
	row("p50 (ms)", "%.1f", off.P50Ms, on.P50Ms, c.Ratio.P50Ms)
	row("p95 (ms)", "%.1f", off.P95Ms, on.P95Ms, 0)
	row("p99 (ms)", "%.1f", off.P99Ms, on.P99Ms, c.Ratio.P99Ms)
	row("max (ms)", "%.1f", off.MaxMs, on.MaxMs, 0)
	row("etcd txns per task", "%.2f", off.EtcdTxnsPerTask, on.EtcdTxnsPerTask, 0)
	row("etcd WAL bytes per task", "%.0f", off.EtcdBytesPerTask, on.EtcdBytesPerTask, 0)
	row("etcd tasks at the end", "%.0f", float64(off.EtcdTasksAtEnd), float64(on.EtcdTasksAtEnd), 0)
	row("etcd in use at the end (MB)", "%.1f", off.EtcdDBInUseEndMB, on.EtcdDBInUseEndMB, 0)
	row("process CPU (µs per task)", "%.0f", off.ProcessCPUSec/float64(max(1, off.Completed))*1e6, on.ProcessCPUSec/float64(max(1, on.Completed))*1e6, 0)
	row("process peak RSS (MB)", "%.0f", off.ProcessPeakRSSMB, on.ProcessPeakRSSMB, 0)
	row("archived tasks", "%.0f", float64(off.ArchiveTasks), float64(on.ArchiveTasks), 0)
	row("archive bytes per task", "%.0f", off.ArchiveBytesPerTask, on.ArchiveBytesPerTask, 0)
	if on.LostChecked > 0 {
		fmt.Fprintf(tw, "lost\t\t%d of %d checked (%s)\n", on.Lost, on.LostChecked, on.LostSample)
	}
	return tw.Flush()
}

// printWindows prints the p99 of each 5 s window, several to a line.
func printWindows(w io.Writer, wins []bench.Window) {
	const perLine = 6
	for i := 0; i < len(wins); i += perLine {
		label := ""
		if i == 0 {
			label = "p99 per 5 s"
		}
		line := ""
		for _, win := range wins[i:min(len(wins), i+perLine)] {
			line += fmt.Sprintf("  %3.0fs %.1f ms (%d", win.StartSec, win.P99Ms, win.Completed)
			if win.Refused > 0 {
				line += fmt.Sprintf(", %d refused", win.Refused)
			}
			line += ")"
		}
		fmt.Fprintf(w, "%s\t%s\n", label, line[2:])
	}
}

// runRecoveryBench runs `reeve bench --embedded --recovery`.
func runRecoveryBench(cmd *cobra.Command, g *globals, cfg bench.Config) error {
	switch {
	case !cfg.Embedded:
		return usagef("--recovery: needs --embedded (it kills and starts its own agents and supervisor)")
	case cfg.Tasks > bench.MaxRecoveryTasks:
		return usagef("--tasks: at most %d with --recovery (one agent holds them all), got %d", bench.MaxRecoveryTasks, cfg.Tasks)
	}
	rep, err := bench.RunRecovery(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if g.output == "json" {
		return printJSONObject(out, rep)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "scenario\ttasks\tre-dispatch p50\tp99\tmax\tlast done\tdeadline spread\tlost\tstuck\tCPU\n")
	for _, s := range rep.Scenarios {
		fmt.Fprintf(tw, "%s\t%d\t%.0f ms\t%.0f ms\t%.0f ms\t%.0f ms\t%.0f ms\t%d\t%d\t%.1f s\n", s.Scenario, s.Tasks,
			s.RedispatchP50Ms, s.RedispatchP99Ms, s.RedispatchMaxMs, s.LastDoneMs, s.DeadlineSpreadMs, s.Lost, s.Stuck, s.ProcessCPUSec)
	}
	return tw.Flush()
}

// checkSpaceFlags refuses the quota and space flags where they cannot
// apply: they configure the embedded etcd and scheduler.
func checkSpaceFlags(cmd *cobra.Command, cfg bench.Config, reservePerStep int64, reclaimEvery time.Duration) error {
	for _, name := range []string{"quota-bytes", "space-reserve-per-step", "space-check-interval", "space-reclaim-interval", "overload-target", "overload-interval", "overload-agent-queues", "overload-cpu-target"} {
		if cmd.Flags().Changed(name) && !cfg.Embedded {
			return usagef("--%s: only with --embedded (it configures the embedded etcd and scheduler)", name)
		}
	}
	switch {
	case cfg.QuotaBytes < 0 || (cfg.QuotaBytes > 0 && cfg.QuotaBytes < 8<<20) || cfg.QuotaBytes > 8<<30:
		return usagef("--quota-bytes: want 0 (etcd's default) or 8 MiB to 8 GiB, got %d", cfg.QuotaBytes)
	case reservePerStep < 0 || reservePerStep > 1<<30:
		return usagef("--space-reserve-per-step: %d is outside [0, 1 GiB]", reservePerStep)
	case cfg.SpaceCheckInterval < 100*time.Millisecond || cfg.SpaceCheckInterval > time.Minute:
		return usagef("--space-check-interval: %s is outside [100ms, 1m]", cfg.SpaceCheckInterval)
	case reclaimEvery < 0:
		return usagef("--space-reclaim-interval: want a non-negative duration, got %s", reclaimEvery)
	}
	return nil
}

// checkArchiveFlags refuses the archive flags where they cannot apply.
func checkArchiveFlags(cmd *cobra.Command, cfg bench.Config, compare, recovery bool, rawEtcd int) error {
	if cmd.Flags().Changed("archive-dsn") && cfg.ArchiveDSN == "" {
		return usagef("--archive-dsn: empty; want postgres://…, sqlite:PATH or %s", bench.ArchivePG)
	}
	for _, name := range []string{"archive-grace", "archive-retention", "archive-interval", "archive-compare"} {
		if cmd.Flags().Changed(name) && !cfg.Embedded {
			return usagef("--%s: only with --embedded (it configures the embedded scheduler)", name)
		}
	}
	for _, name := range []string{"archive-grace", "archive-retention", "archive-interval", "archive-wait", "archive-compare"} {
		if cmd.Flags().Changed(name) && cfg.ArchiveDSN == "" {
			return usagef("--%s: needs --archive-dsn", name)
		}
	}
	switch {
	case cfg.ArchiveDSN != "" && (recovery || rawEtcd > 0):
		return usagef("--archive-dsn: not with --recovery or --raw-etcd")
	case (cfg.ArchiveDSN == bench.ArchivePG || strings.HasPrefix(cfg.ArchiveDSN, bench.ArchivePG+"?")) && !cfg.Embedded:
		return usagef("--archive-dsn %s: a throwaway PostgreSQL server is only for --embedded; give a running target's own archive DSN", bench.ArchivePG)
	case cfg.ArchiveGrace <= 0:
		return usagef("--archive-grace: want a positive duration, got %s", cfg.ArchiveGrace)
	case cfg.ArchiveRetention < 0:
		return usagef("--archive-retention: want a non-negative duration, got %s", cfg.ArchiveRetention)
	case cfg.ArchiveInterval <= 0:
		return usagef("--archive-interval: want a positive duration, got %s", cfg.ArchiveInterval)
	case cfg.ArchiveWait < 0:
		return usagef("--archive-wait: want a non-negative duration, got %s", cfg.ArchiveWait)
	case compare && cfg.QuotaBytes > 0:
		return usagef("--archive-compare: not with --quota-bytes")
	}
	return nil
}

// checkBenchFlags refuses flag values the run cannot honour, as usage errors
// naming the flag.
func checkBenchFlags(cfg bench.Config, rawEtcd int) error {
	switch {
	case cfg.Tasks < 1:
		return usagef("--tasks: want at least 1, got %d", cfg.Tasks)
	case cfg.Concurrency < 1:
		return usagef("--concurrency: want at least 1, got %d", cfg.Concurrency)
	case cfg.Rate < 0:
		return usagef("--rate: want 0 (closed loop) or a positive rate, got %g", cfg.Rate)
	case cfg.Steps < 1 || cfg.Steps > 100:
		return usagef("--steps: want 1 to 100, got %d", cfg.Steps)
	case cfg.Shape != "sequential" && cfg.Shape != "fanout":
		return usagef("--shape: want sequential or fanout, got %q", cfg.Shape)
	case cfg.Agents < 1:
		return usagef("--agents: want at least 1, got %d", cfg.Agents)
	case cfg.AgentConcurrency < 1 || cfg.AgentConcurrency > 10000:
		return usagef("--agent-concurrency: want 1 to 10000, got %d", cfg.AgentConcurrency)
	case cfg.Work < 0:
		return usagef("--work: want a non-negative duration, got %s", cfg.Work)
	case cfg.Duration < 0:
		return usagef("--duration: want a non-negative duration, got %s", cfg.Duration)
	case cfg.ServerPID != 0 && cfg.Embedded:
		return usagef("--server-pid: only for a running target (the embedded figures are this process's)")
	case cfg.MaxDuration <= 0:
		return usagef("--max-duration: want a positive duration, got %s", cfg.MaxDuration)
	case cfg.MaxDuration < cfg.Duration:
		return usagef("--max-duration: %s would cut the --duration %s run short", cfg.MaxDuration, cfg.Duration)
	case rawEtcd < 0:
		return usagef("--raw-etcd: want a positive transaction count, got %d", rawEtcd)
	case !cfg.Embedded && rawEtcd == 0 && len(cfg.EtcdEndpoints) == 0:
		return usagef("--etcd-endpoints: a running target needs its etcd endpoints to observe completions (or use --embedded)")
	}
	return nil
}
