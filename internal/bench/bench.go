// Package bench measures Reeve end to end: it submits tasks of a no-op
// workflow to a scheduler, runs no-op agents for them, and reports
// throughput, latency percentiles and etcd writes per task. `reeve bench`
// is its command line.
//
// The files go by what they measure: bench.go drives a run (Run),
// load.go submits tasks and counts refusals, follow.go sees tasks end
// (submit-to-completed latency), agents.go runs the no-op agents
// (dispatch latency), latency.go reads queue waits and computes
// percentiles, space.go samples etcd's database size and NOSPACE alarm,
// etcdmetrics.go counts etcd's writes, proc.go CPU and memory, windows.go
// latencies by completion time, archive.go the archive's figures and the
// lost check (internal/taskread); embedded.go and remote.go are the two
// targets, recovery.go the recovery measurement; config.go and report.go
// hold Config (and open its archive) and Report.
package bench

import (
	"context"
	"fmt"
	"math"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/dial"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
)

// target is the schedulers to load, and how to observe their etcd.
type target struct {
	sched   dial.Config
	dbSize  func() (total, inUse int64) // bytes; nil when unknown
	etcd    *clientv3.Client
	applied func(context.Context) (uint64, error) // etcd's applied raft index
	// counters reads one member's write counters (see etcdCounters).
	counters func(context.Context) (etcdCounters, error)
	close    func()
}

// Run performs one bounded run.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.MaxDuration)
	defer cancel()
	arch, dsnLabel, closeArchive, err := openArchive(ctx, cfg.ArchiveDSN)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer closeArchive()
	cfg.archive = arch
	var tg *target
	if cfg.Embedded {
		tg, err = startEmbedded(ctx, cfg)
	} else {
		tg, err = dialTarget(cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer tg.close()

	cc, err := dial.Schedulers(tg.sched)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer cc.Close()
	client := reevev1.NewSchedulerServiceClient(cc)
	wf := workflow(cfg)
	if _, err := client.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: wf}); err != nil {
		return nil, fmt.Errorf("bench: register workflow: %w", err)
	}

	if cfg.MaxRunning > 0 {
		if err := setLimit(ctx, cc, int32(cfg.MaxRunning)); err != nil {
			return nil, err
		}
	}

	dispatchLat := &samples{}
	agentErrs := &agentErrors{}
	stopAgents, err := startAgents(cfg, tg.sched, dispatchLat, agentErrs)
	if err != nil {
		return nil, err
	}
	defer stopAgents()

	done := newCompletions()
	st := store.New(tg.etcd)
	rev, err := st.Revision(ctx)
	if err != nil {
		return nil, err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watching := make(chan error, 1)
	tasks := taskread.New(st, arch)
	go func() { watching <- followEnded(watchCtx, st, tasks, rev, done) }()

	startIndex, err := tg.applied(ctx)
	if err != nil {
		return nil, err
	}
	startCounters, err := tg.counters(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	arch0, err := tasks.ArchiveStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	cpu0 := cpuSeconds()
	db := &dbSampler{size: tg.dbSize}
	stopSampling := db.start()
	alarms := &alarmSampler{cli: tg.etcd}
	stopAlarms := func() {}
	if cfg.QuotaBytes > 0 {
		stopAlarms = alarms.start()
	}
	srv := &procSampler{pid: cfg.ServerPID}
	stopServer := srv.start()
	rt0 := sampleRuntime()
	start := time.Now()
	wins := newWindows(start)
	latencies, counts, errs, firstErr := load(ctx, cfg, client, wf.GetName(), done, wins)
	elapsed := time.Since(start)
	rt1 := sampleRuntime()
	stopSampling()
	stopAlarms()
	stopServer()
	if len(latencies) == 0 && firstErr != nil {
		return nil, fmt.Errorf("bench: %w", firstErr)
	}
	// The reads after the load get their own time: a run cut short by
	// MaxDuration still reports what it measured.
	after, cancelAfter := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancelAfter()
	endIndex, err := tg.applied(after)
	if err != nil {
		return nil, err
	}
	endCounters, err := tg.counters(after)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	wrote := endCounters.sub(startCounters)
	cpu := cpuSeconds() - cpu0
	stopWatch()
	<-watching

	rep := &Report{
		Mode:  map[bool]string{true: "embedded", false: "remote"}[cfg.Embedded],
		Tasks: cfg.Tasks, Steps: cfg.Steps, Shape: cfg.Shape, Concurrency: cfg.Concurrency, Rate: cfg.Rate, Agents: cfg.Agents,
		Completed:       len(latencies),
		Errors:          errs,
		Failed:          done.failedCount(),
		DurationSec:     elapsed.Seconds(),
		TasksPerSec:     float64(len(latencies)) / elapsed.Seconds(),
		EtcdTxnsPerTask: float64(endIndex-startIndex) / float64(max(1, len(latencies))),
	}
	perTask := 1 / float64(max(1, len(latencies)))
	rep.EtcdBytesPerTask = wrote.WALBytes * perTask
	rep.EtcdOpsPerTask = (wrote.Puts + wrote.Deletes) * perTask
	rep.EtcdPutBytesPerTask = wrote.PutBytes * perTask
	if firstErr != nil {
		rep.FirstError = firstErr.Error()
	}
	rep.P50Ms, rep.P95Ms, rep.P99Ms, rep.MaxMs = percentiles(latencies)
	rep.Accepted, rep.Refused, rep.RefusedReasons = counts.accepted, counts.refused, counts.reasons
	rep.RefusalP50Ms, _, rep.RefusalP99Ms, _ = percentiles(counts.refusalLat)
	rep.Windows = wins.report()
	if cfg.Embedded {
		rep.ProcessCPUSec = cpu
		rep.ProcessPeakRSSMB = peakRSSMB()
		var gc float64
		rep.AllocsPerTask, rep.AllocBytesPerTask, gc, rep.GCCycles = runtimeDelta(rt0, rt1, len(latencies))
		rep.GCCPUFraction = &gc
	}
	rep.EtcdDBStartMB, rep.EtcdDBMaxMB, rep.EtcdDBEndMB, rep.EtcdDBInUseMB = db.report()
	if cfg.QuotaBytes > 0 {
		q := float64(cfg.QuotaBytes)
		rep.Flood = &FloodReport{
			QuotaBytes: cfg.QuotaBytes,
			Accepted:   counts.accepted, Refused: counts.refused, Completed: len(latencies),
			Lost:              counts.accepted - len(latencies),
			NoSpaceRaised:     alarms.seen || alarms.end(after),
			NoSpaceAtEnd:      alarms.end(after),
			PeakDBFraction:    math.Round(float64(db.max)/q*1000) / 1000,
			PeakInUseFraction: math.Round(float64(db.maxInUse)/q*1000) / 1000,
		}
	}
	rep.ServerCPUSec, rep.ServerPeakRSSMB = srv.report()
	qw, err := queueWaits(after, st)
	if err != nil {
		return nil, err
	}
	rep.QueueWaitP50Ms, _, rep.QueueWaitP99Ms, _ = percentiles(qw)
	rep.DispatchP50Ms, _, rep.DispatchP99Ms, _ = percentiles(dispatchLat.all())
	rep.AgentsStopped, rep.AgentError = agentErrs.report()
	if err := reportArchive(ctx, cfg, tg, tasks, arch0, counts, rep); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	rep.ArchiveDSN = dsnLabel
	return rep, nil
}

// workflow is the no-op workflow of the run.
func workflow(cfg Config) *reevev1.Workflow {
	w := &reevev1.Workflow{Name: fmt.Sprintf("bench.%s.%d", cfg.Shape, cfg.Steps)}
	for i := range cfg.Steps {
		s := &reevev1.StepSpec{Name: fmt.Sprintf("s%d", i), Type: "bench.noop", Timeout: durationpb.New(time.Minute)}
		switch {
		case i == 0:
		case cfg.Shape == "fanout":
			s.DependsOn = []string{"s0"}
		default:
			s.DependsOn = []string{fmt.Sprintf("s%d", i-1)}
		}
		w.Steps = append(w.Steps, s)
	}
	return w
}
