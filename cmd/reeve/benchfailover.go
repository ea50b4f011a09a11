package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reeve-org/reeve/internal/cluster"
	"github.com/reeve-org/reeve/internal/cluster/failover"
)

// failoverFlags are the flags of `reeve bench --failover`.
type failoverFlags struct {
	on         bool
	etcdBin    string
	dir        string
	rounds     int
	sessionTTL int
	work       time.Duration
	secure     bool
}

func (f *failoverFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&f.on, "failover", false, "measure failover times on a local cluster of separate processes (3 etcd members, 2 schedulers, 2 supervisors, agents): a SIGKILLed supervisor leader, then a SIGKILLed scheduler, --rounds times each")
	fs.StringVar(&f.etcdBin, "etcd-bin", "etcd", "with --failover: the etcd server binary (make etcd installs v3.7.3 in .tools/bin)")
	fs.StringVar(&f.dir, "cluster-dir", "", "with --failover: directory for the cluster's data and logs (default a temporary one, removed after a successful run)")
	fs.IntVar(&f.rounds, "rounds", 3, "with --failover: kills of each kind")
	fs.IntVar(&f.sessionTTL, "session-ttl", 10, "with --failover: the supervisors' --session-ttl in seconds (at least 3: the hung steps must expire before the killed leader's lease)")
	fs.DurationVar(&f.work, "failover-work", 300*time.Millisecond, "with --failover: how long each step of the scheduler round's load works")
	fs.BoolVar(&f.secure, "secure", false, "with --failover: run the cluster over mutual TLS with role checks, etcd included (as 'reeve cluster --secure')")
}

// failoverReport is the JSON of `reeve bench --failover -o json`.
type failoverReport struct {
	Supervisor []failover.SupervisorFailover `json:"supervisor"`
	Scheduler  []failover.SchedulerFailover  `json:"scheduler"`
	LostAgent  []failover.LostAgent          `json:"lost_agent"`
	// Load1Start, Load1End: the machine's 1-minute load average.
	Load1Start string `json:"load1_start"`
	Load1End   string `json:"load1_end"`
}

func runFailoverBench(cmd *cobra.Command, g *globals, f failoverFlags) (err error) {
	switch {
	case f.rounds < 1:
		return usagef("--rounds: want at least 1, got %d", f.rounds)
	case f.sessionTTL < 3:
		return usagef("--session-ttl: want at least 3 (the hung steps expire 2 s after dispatch and must do so before the killed leader's lease, 2/3 TTL to TTL after the kill), got %d", f.sessionTTL)
	case f.work <= 0 || f.work > 2*time.Second:
		return usagef("--failover-work: want more than 0 and at most 2s (the chaos steps' timeout is 3 s), got %s", f.work)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	etcd, err := exec.LookPath(f.etcdBin)
	if err != nil {
		return usagef("--etcd-bin: %v (run 'make etcd')", err)
	}
	dir, keep := f.dir, f.dir != ""
	if dir == "" {
		if dir, err = os.MkdirTemp("", "reeve-failover-"); err != nil {
			return err
		}
	}
	defer func() {
		if err == nil && !keep {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Fprintf(cmd.ErrOrStderr(), "reeve bench: cluster data and logs in %s\n", dir)
		}
	}()
	ctx := cmd.Context()
	rep := failoverReport{Load1Start: load1()}
	cfg := failover.ClusterConfig(dir, self, etcd, f.sessionTTL, 3)
	cfg.Secure = f.secure
	c, err := cluster.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		if serr := c.Stop(15 * time.Second); err == nil && serr != nil {
			err = serr
		}
	}()
	m, err := failover.New(c)
	if err != nil {
		return err
	}
	defer m.Close()
	rctx, cancel := context.WithTimeout(ctx, time.Duration(f.rounds)*(time.Duration(f.sessionTTL+failover.SchedulerSessionTTL)*time.Second+4*time.Minute))
	defer cancel()
	if err := m.WaitReady(rctx); err != nil {
		return err
	}
	progress := cmd.ErrOrStderr()
	for i := 1; i <= f.rounds; i++ {
		r, err := m.SupervisorRound(rctx, i, 4)
		if err != nil {
			return fmt.Errorf("supervisor round %d: %w", i, err)
		}
		fmt.Fprintf(progress, "supervisor round %d: first recovery %.0f ms after the kill\n", i, r.FirstRecoveryMs)
		rep.Supervisor = append(rep.Supervisor, r)
	}
	for i := 1; i <= f.rounds; i++ {
		r, err := m.SchedulerRound(rctx, i, failover.SchedulerLoad{Work: f.work})
		if err != nil {
			return fmt.Errorf("scheduler round %d: %w", i, err)
		}
		fmt.Fprintf(progress, "scheduler round %d: every moved agent reported %.0f ms after the kill\n", i, r.AllResumedMs)
		rep.Scheduler = append(rep.Scheduler, r)
	}
	for i := 1; i <= f.rounds; i++ {
		r, err := m.LostAgentRound(rctx, i, 4)
		if err != nil {
			return fmt.Errorf("lost-agent round %d: %w", i, err)
		}
		fmt.Fprintf(progress, "lost-agent round %d: heartbeat steps re-dispatched %.0f ms after the kill\n", i, r.RedispatchMs)
		rep.LostAgent = append(rep.LostAgent, r)
	}
	rep.Load1End = load1()
	return printFailover(cmd, g, rep)
}

func printFailover(cmd *cobra.Command, g *globals, rep failoverReport) error {
	out := cmd.OutOrStdout()
	if g.output == "json" {
		return printJSONObject(out, rep)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "supervisor leader SIGKILLed\tlease deleted\tfirst recovery\t(after lease)\tlast recovery\tfirst re-dispatch\ttarget (TTL + 500 ms)\tmet\n")
	for _, r := range rep.Supervisor {
		fmt.Fprintf(tw, "round %d: %s → %s\t%.0f ms\t%.0f ms\t%.0f ms\t%.0f ms\t%.0f ms\t%.0f ms\t%v\n", r.Round, r.Killed, r.NewLeader,
			r.LeaseGoneMs, r.FirstRecoveryMs, r.RecoveryAfterLeaseMs, r.LastRecoveryMs, r.FirstRedispatchMs, r.TargetMs, r.Met)
	}
	fmt.Fprintf(tw, "\nscheduler SIGKILLed\tagents moved\treconnect p50 / max\tfirst result\tall agents reporting\tin-flight results accepted\tretried\ttarget\tmet\n")
	for _, r := range rep.Scheduler {
		fmt.Fprintf(tw, "round %d: %s\t%d\t%.0f / %.0f ms\t%.0f ms\t%.0f ms\t%d of %d tasks\t%d\t%.0f ms\t%v\n", r.Round, r.Killed, r.AgentsMoved,
			r.ReconnectP50Ms, r.ReconnectMaxMs, r.FirstResultMs, r.AllResumedMs, r.InFlightAccepted, r.Tasks, r.Retried, r.TargetMs, r.Met)
	}
	for _, r := range rep.Scheduler {
		for _, why := range r.RetriedWhy {
			fmt.Fprintf(tw, "  retried in round %d\t%s\n", r.Round, why)
		}
	}
	fmt.Fprintf(tw, "\nagent and its scheduler lost\tsteps\tAGENT_LOST decided\texpired\tre-dispatched first / last\ttarget (heartbeat timeout + 200 ms)\tmet\n")
	for _, r := range rep.LostAgent {
		fmt.Fprintf(tw, "round %d: %s (lease TTL %d s)\t%d\t%.0f ms\t%.0f ms\t%.0f / %.0f ms\t%.0f ms\t%v\n", r.Round, r.Killed, r.SchedulerTTLSec, r.Steps,
			r.AgentLostMs, r.ExpiredMs, r.RedispatchMs, r.LastRedispatchMs, r.TargetMs, r.Met)
	}
	var sup, sched []float64
	for _, r := range rep.Supervisor {
		sup = append(sup, r.FirstRecoveryMs)
	}
	for _, r := range rep.Scheduler {
		sched = append(sched, r.AllResumedMs)
	}
	fmt.Fprintf(tw, "\nsummary\tsupervisor first recovery %s; scheduler, all agents reporting %s; load %s → %s\n", spread(sup), spread(sched), rep.Load1Start, rep.Load1End)
	return tw.Flush()
}

// spread formats min / median / max in ms.
func spread(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return fmt.Sprintf("min %.0f / median %.0f / max %.0f ms", s[0], s[len(s)/2], s[len(s)-1])
}

// load1 returns the 1-minute load average (Linux), or "?".
func load1() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
