package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/reeve-org/reeve/internal/chaos/workload"
	"github.com/reeve-org/reeve/internal/cluster"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

// Config describes a chaos run. Binaries and Dir are required; the rest has
// defaults.
type Config struct {
	// Seed fixes the fault schedule and the tasks' behaviour; 0 picks one
	// (printed, and in the report, for replay).
	Seed uint64
	// Tasks to submit; default 2,000.
	Tasks int
	// FailShare is the share of tasks designed to fail for good at a random
	// step and compensate; default 0.2.
	FailShare float64
	// WideTasks of the Tasks run the wide workflow (64 parallel steps and
	// a join); default 20, negative: none.
	WideTasks int
	// TransientPerMille is the share of attempts that fail transiently; default 50.
	TransientPerMille int
	// Rate is the submission rate (tasks/s); default 25. Faults are injected
	// while tasks are being submitted, so Tasks/Rate is the fault phase.
	Rate float64
	// FaultEvery is the mean time between faults; default 1.5s.
	FaultEvery time.Duration
	// Agents is the number of agent processes; default 4.
	Agents int
	// DrainTimeout bounds the wait, after the last fault, for every task to
	// end; default 5 minutes.
	DrainTimeout time.Duration
	// SampleEvery is how often etcd is sampled for running steps without a
	// deadline; default 1s. OverdueWindow is how far past its complete-by a
	// dispatched step may be at a sample (supervisor failover + tick +
	// faults); default 30s.
	SampleEvery, OverdueWindow time.Duration
	// Dir holds the cluster's data, logs and the side-effect logs. Required.
	Dir string
	// Reeve, Etcd, Toxiproxy are the binaries. Required.
	Reeve, Etcd, Toxiproxy string
	// Log receives progress lines; default io.Discard.
	Log io.Writer
	// Secure runs the cluster over mutual TLS with role checks
	// (cluster.Config.Secure): the load calls the schedulers as
	// cluster.Client, the operators' recovery actions as cluster.Admin, the
	// checks read etcd with a client certificate, and a call of a component refused by the role checks is
	// a violation. Default plaintext.
	Secure bool
	// ArchiveDSN, when set, is the archive the schedulers share
	// (cluster.Config.ArchiveDSN; a PostgreSQL database): finished tasks
	// move there 2 s after they end, during the run, and the checks read
	// every task from etcd or, when it moved, from the archive; an expected
	// task in neither is a violation. Default: no archive.
	ArchiveDSN string
}

func (c *Config) defaults() error {
	if c.Dir == "" || c.Reeve == "" || c.Etcd == "" || c.Toxiproxy == "" {
		return errors.New("chaos: Dir, Reeve, Etcd and Toxiproxy are required")
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	setInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	setDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	setInt(&c.Tasks, 2000)
	setInt(&c.TransientPerMille, 50)
	setInt(&c.Agents, 4)
	setInt(&c.WideTasks, 20)
	if c.FailShare == 0 {
		c.FailShare = 0.2
	}
	if c.Rate == 0 {
		c.Rate = 25
	}
	setDur(&c.FaultEvery, 1500*time.Millisecond)
	setDur(&c.DrainTimeout, 5*time.Minute)
	setDur(&c.SampleEvery, time.Second)
	setDur(&c.OverdueWindow, 30*time.Second)
	if c.Log == nil {
		c.Log = io.Discard
	}
	switch {
	case c.Tasks < 0, c.FailShare < 0, c.FailShare > 1, c.Rate < 0, c.Agents < 2:
		return fmt.Errorf("chaos: want tasks ≥ 0, 0 ≤ fail share ≤ 1, rate > 0, agents ≥ 2; got %d, %v, %v, %d", c.Tasks, c.FailShare, c.Rate, c.Agents)
	}
	if c.WideTasks < 0 {
		c.WideTasks = 0
	}
	return nil
}

// sideEffectDir is where agents write their logs.
func (c *Config) sideEffectDir() string { return filepath.Join(c.Dir, "side-effects") }

// Run starts a cluster, runs the load under faults, waits for it to drain,
// checks the invariants and stops the cluster. It returns an error only
// when the run could not be carried out (the cluster did not start, the
// load did not drain within DrainTimeout is reported as a violation).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.sideEffectDir(), 0o755); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(cfg.Log, format+"\n", args...) }
	logf("chaos: seed %d (replay with --seed %d), %d tasks at %.0f/s, data in %s", cfg.Seed, cfg.Seed, cfg.Tasks, cfg.Rate, cfg.Dir)

	c, err := cluster.Start(ctx, cluster.Config{
		Dir: cfg.Dir, Reeve: cfg.Reeve, Etcd: cfg.Etcd, Toxiproxy: cfg.Toxiproxy, NoFsync: true,
		Agents: cfg.Agents, SupervisorTick: 500 * time.Millisecond, SessionTTL: 3, EtcdMaxTxnOps: workload.MaxTxnOps,
		Secure: cfg.Secure, Workflows: workload.Workflows(), ArchiveDSN: cfg.ArchiveDSN,
		AgentArgs: func(i int) []string {
			return []string{"--chaos", "--side-effects", filepath.Join(cfg.sideEffectDir(), fmt.Sprintf("agent-%d.jsonl", i+1)), "--log-level", "warn"}
		},
	})
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop(15 * time.Second)
		}
	}()
	cli, err := c.Client()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	// In a secure cluster the load calls as a client of namespace default,
	// the operators as an admin.
	// Steps waiting for a completion from outside are completed by name
	// as an approver (and their tokens read as one).
	var client, operator, approver tlsconfig.Files
	if c.Secure() {
		client, operator, approver = c.Files(cluster.Client), c.Files(cluster.Admin), c.Files(cluster.Approver)
	}

	// Limits on its step types, which the faults must not make it exceed.
	if err := setLimits(ctx, c.SchedulerAddrs, operator, logf); err != nil {
		return nil, err
	}
	rep := &Report{Seed: cfg.Seed, Tasks: cfg.Tasks, Faults: map[string]int{}}
	plan := planTasks(planRNG(cfg.Seed), cfg)
	inj := newInjector(c, faultRNG(cfg.Seed), cfg.FaultEvery, logf)

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	smp := newSampler(cli, cfg.OverdueWindow)
	sampleDone := make(chan struct{})
	go func() { defer close(sampleDone); smp.run(runCtx, cfg.SampleEvery) }()
	// The wide tasks' histories outgrow their records: keep every version.
	rctx, cancelRev := context.WithTimeout(ctx, 10*time.Second)
	head, err := cli.Get(rctx, "reeve-chaos-start")
	cancelRev()
	if err != nil {
		stopRun()
		<-sampleDone
		return nil, fmt.Errorf("chaos: read etcd's revision: %w", err)
	}
	pager := newHistoryPager(cli, layout.Task("default", fmt.Sprintf("chaos-%d-wide-", cfg.Seed)))
	pagerDone := make(chan struct{})
	go func() { defer close(pagerDone); pager.run(runCtx, head.Header.Revision+1) }()
	ops := &operatorLog{}
	waits := &waitLog{book: newCallbackBook(cfg.sideEffectDir())}

	started := time.Now()
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); inj.run(runCtx) }()
	submitted, subErr := submit(runCtx, c.SchedulerAddrs, client, operator, approver, plan, cfg.Rate, ops, waits, logf)
	inj.stop()
	<-faultsDone
	lastFault := inj.heal(ctx)
	rep.FaultPhase = seconds(time.Since(started))
	rep.Submitted = submitted
	logf("chaos: %d tasks submitted, faults stopped and healed after %.1fs; draining", submitted, rep.FaultPhase)
	if subErr != nil {
		stopRun()
		<-sampleDone
		<-pagerDone
		return nil, subErr
	}

	// The checks read every task from etcd or, when it moved, the archive.
	tasks, err := taskread.Open(ctx, store.New(cli, store.WithRecordCache(0)), cfg.ArchiveDSN)
	if err != nil {
		stopRun()
		<-sampleDone
		<-pagerDone
		return nil, fmt.Errorf("chaos: open the archive: %w", err)
	}
	defer tasks.Close()
	drained, drainErr := waitDrained(ctx, tasks, cfg.Tasks, cfg.DrainTimeout)
	rep.DrainAfterLastFault = seconds(drained.Sub(lastFault))
	if drainErr != nil {
		rep.violate("drain", "", drainErr.Error())
	}
	stopRun()
	<-sampleDone
	<-pagerDone
	inj.report(rep)
	smp.report(rep)
	ops.report(rep)
	waits.report(rep)
	logf("chaos: drained %.1fs after the last fault; checking", rep.DrainAfterLastFault)

	// Check while etcd is up; agents write each side effect with one write(2).
	if err := check(ctx, cli, tasks, cfg, plan, pager, waits, rep); err != nil {
		return nil, err
	}
	// And the store's own invariants, as `reeve verify` checks them.
	if err := verifyStore(ctx, cli, tasks, plan, rep); err != nil {
		return nil, err
	}
	// And, in production's configuration, that the role checks refused no
	// call a component made.
	if cfg.Secure {
		if err := checkRefusedCalls(c, rep); err != nil {
			return nil, err
		}
	}
	stopped = true
	if err := c.Stop(15 * time.Second); err != nil {
		logf("chaos: stop: %v", err)
	}
	return rep, nil
}

// planRNG and faultRNG are the two independent streams a seed gives: the
// tasks' designed behaviour and the fault schedule.
func planRNG(seed uint64) *rand.Rand  { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
func faultRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed^0x5bd1e995, seed)) }

func seconds(d time.Duration) float64 {
	return float64(d.Round(10*time.Millisecond)) / float64(time.Second)
}

// checkRefusedCalls reports the calls of the secure cluster's components
// that the role checks refused (at most 5, then a count). The agents'
// refused workflow registrations are expected, and their absence means the
// schedulers' logs were not read right.
func checkRefusedCalls(c *cluster.Cluster, rep *Report) error {
	const invariant = "no call of a component refused by the role checks"
	calls, err := c.RefusedCalls()
	if err != nil {
		return err
	}
	expected, unexpected := 0, 0
	for _, r := range calls {
		switch {
		case r.Expected():
			expected++
		case unexpected < 5:
			unexpected++
			rep.violate(invariant, "", r.Scheduler+": "+r.Line)
		default:
			unexpected++
		}
	}
	if unexpected > 5 {
		rep.violate(invariant, "", fmt.Sprintf("%d more refused calls in the schedulers' logs", unexpected-5))
	}
	if expected == 0 {
		rep.violate(invariant, "", "no refused call found in the schedulers' logs, not even the agents' workflow registrations: the logs were not read right")
	}
	return nil
}
