// Package bench measures Reeve end to end: it submits tasks of a no-op
// workflow to a scheduler, runs no-op agents for them, and reports
// throughput, latency percentiles and etcd writes per task. `reeve bench`
// is its command line.
package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/archive"
	"github.com/reeve-org/reeve/internal/dial"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Config describes one run. Zero values take the documented defaults.
type Config struct {
	// Embedded starts etcd (fsync on) and a scheduler in this process.
	Embedded bool
	// DataDir of the embedded etcd; a temporary directory when empty.
	DataDir string
	// NoFsync turns fsync off in the embedded etcd (not what production does).
	NoFsync bool
	// Schedulers of a running target (not Embedded): one address or
	// several comma-separated, with TLS, a client certificate and a token
	// as internal/dial takes them. Submissions are spread round-robin over
	// the schedulers; each agent connects to one at a time, starting at a
	// random one. The certificate or token needs the client and agent roles
	// (and admin, to register the workflow).
	Schedulers dial.Config
	// EtcdEndpoints of the running scheduler's etcd (not Embedded): needed
	// to see completions and count etcd writes.
	EtcdEndpoints []string
	// EtcdTLS, EtcdUsername and EtcdPassword, when set, are the TLS
	// configuration (CA, client certificate) and credentials of the
	// connection to EtcdEndpoints. Default plaintext, no authentication.
	EtcdTLS                    *tls.Config
	EtcdUsername, EtcdPassword string
	// Tasks to complete; default 1000.
	Tasks int
	// Duration, when positive, stops submitting after this long (or after
	// Tasks, whichever comes first); the run then waits for the tasks in
	// flight.
	Duration time.Duration
	// ServerPID, when positive, is the process id of the target (not
	// Embedded) whose CPU time and resident memory the report gives.
	ServerPID int
	// Concurrency of the closed loop: tasks in flight; default 64.
	Concurrency int
	// Rate, when positive, submits open loop at this many tasks per second.
	Rate float64
	// Steps per task; default 1.
	Steps int
	// Shape of multi-step workflows: "sequential" (a chain) or "fanout" (one
	// root, the others depending on it); default sequential.
	Shape string
	// Agents is how many agent connections serve the steps; default 2.
	Agents int
	// AgentConcurrency is each agent's max concurrent steps; default 512.
	AgentConcurrency int
	// Work is how long each agent handler holds its step; default 0 (no-op).
	Work time.Duration
	// CommitWindow of the embedded scheduler's store (scheduler.WithCommitWindow);
	// 0 takes the default (1ms), a negative value turns it off.
	CommitWindow time.Duration
	// RecordCompression makes the embedded scheduler write task records
	// compressed (scheduler.WithRecordCompression).
	RecordCompression bool
	// Retention of terminal tasks in the embedded scheduler; default 72h.
	Retention time.Duration
	// MaxDuration bounds the run; default 5m.
	MaxDuration time.Duration
	// QuotaBytes, when positive, is the embedded etcd's space quota and
	// makes the run a flood check: submissions refused with
	// RESOURCE_EXHAUSTED are counted (not errors), and the report's Flood
	// part gives accepted, refused, completed and lost tasks, whether etcd
	// raised NOSPACE and the peak database size as a fraction of the quota.
	QuotaBytes int64
	// SpaceReservePerStep is the embedded scheduler's
	// scheduler.WithSpaceReserve; 0 takes the scheduler's default (4 KiB),
	// negative reserves nothing.
	SpaceReservePerStep int64
	// SpaceCheckInterval is the embedded scheduler's
	// scheduler.WithSpaceCheckInterval; 0 takes its default (5s).
	SpaceCheckInterval time.Duration
	// SpaceReclaim is the embedded scheduler's scheduler.WithSpaceReclaim;
	// 0 takes its default (1m), negative turns it off.
	SpaceReclaim time.Duration
	// AckTimeout is the embedded scheduler's scheduler.WithAckTimeout; 0
	// takes its default (5s).
	AckTimeout time.Duration
	// OverloadTarget and OverloadInterval are the embedded scheduler's
	// scheduler.WithOverload; 0 takes its defaults (50ms, 100ms), a
	// negative target turns shedding off.
	OverloadTarget, OverloadInterval time.Duration
	// OverloadAgentQueues: scheduler.WithOverloadAgentQueues.
	OverloadAgentQueues bool
	// OverloadCPU: scheduler.WithOverloadCPU (0: off).
	OverloadCPU time.Duration
	// RecoveryCPUProfile, in recovery mode, is a file name: each scenario
	// writes a CPU profile of the whole process, from the healthy agent's
	// connection to the scenario's end, to it with the scenario's name
	// appended ("cpu.pprof.silent"). Empty: no profile.
	RecoveryCPUProfile string
	// ArchiveDSN, when set, names the archive of finished tasks
	// (archive.Open's forms). Embedded, the scheduler moves tasks there
	// ArchiveGrace after they end (scheduler.WithArchive); with a running
	// target it must be the target's own archive, only read, for the
	// report's archive figures and the lost check. ArchivePG (embedded
	// only) starts a throwaway PostgreSQL server for the run and stops it
	// at the end. Default: no archive.
	ArchiveDSN string
	// ArchiveGrace is how long an ended task stays in etcd before it moves
	// to the archive (embedded); default 30s.
	ArchiveGrace time.Duration
	// ArchiveRetention is the embedded scheduler's
	// scheduler.WithArchiveRetention; 0 takes its default (30 days).
	ArchiveRetention time.Duration
	// ArchiveInterval is the embedded scheduler's
	// scheduler.WithArchiveInterval; 0 takes its default (5s).
	ArchiveInterval time.Duration
	// ArchiveWait, when positive, makes the run wait after the load, up to
	// this long, until etcd holds no task record (every task ended and
	// moved to the archive), before the archive and etcd figures are read.
	// Default 0: no wait.
	ArchiveWait time.Duration
	// VerifyLost checks after the load that every task whose submission
	// was acknowledged exists, in etcd or in the archive: all of them up to
	// LostCheckAll, else a random LostSample. Always on with an archive.
	VerifyLost bool
	// Log receives progress; default discards.
	Log *slog.Logger

	// archive is the opened ArchiveDSN, for startEmbedded.
	archive archive.Archive
}

func (c *Config) defaults() error {
	if c.Tasks <= 0 {
		c.Tasks = 1000
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 64
	}
	if c.Steps <= 0 {
		c.Steps = 1
	}
	if c.Shape == "" {
		c.Shape = "sequential"
	}
	if c.Shape != "sequential" && c.Shape != "fanout" {
		return fmt.Errorf("shape: want sequential or fanout, got %q", c.Shape)
	}
	if c.Agents <= 0 {
		c.Agents = 2
	}
	if c.AgentConcurrency <= 0 {
		c.AgentConcurrency = 512
	}
	if c.MaxDuration <= 0 {
		c.MaxDuration = 5 * time.Minute
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.ArchiveGrace <= 0 {
		c.ArchiveGrace = 30 * time.Second
	}
	if _, pg := throwawayPG(c.ArchiveDSN); pg && !c.Embedded {
		return errors.New("archive DSN pg (a throwaway PostgreSQL server) needs embedded mode")
	}
	if !c.Embedded && (c.Schedulers.Address == "" || len(c.EtcdEndpoints) == 0) {
		return errors.New("a running target needs both an address and etcd endpoints (or use embedded mode)")
	}
	return nil
}

// Report is the outcome of a run. Latencies are in milliseconds.
type Report struct {
	Mode        string  `json:"mode"`
	Tasks       int     `json:"tasks"`
	Steps       int     `json:"steps"`
	Shape       string  `json:"shape"`
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate"`
	Agents      int     `json:"agents"`
	Completed   int     `json:"completed"`
	Failed      int     `json:"failed"`
	// Errors counts tasks whose submission failed (but for a refusal) or
	// that did not complete before the run ended; FirstError is the first
	// such error.
	Errors     int    `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// Accepted counts submissions that succeeded; Refused those refused
	// with RESOURCE_EXHAUSTED (shedding, rate and space limits), which are
	// not errors and not in the latency figures; RefusedReasons counts them
	// by ErrorInfo reason. RefusalP50Ms and RefusalP99Ms are the latency of
	// the refused SubmitTask calls. Open loop drops a refused task; closed
	// loop waits the refusal's RetryInfo delay (20 ms without one) and sends
	// it again, timing the task from its admitted submission (a flood check,
	// Config.QuotaBytes, waits 20 ms and moves on to its next task).
	Accepted       int            `json:"accepted"`
	Refused        int            `json:"refused"`
	RefusedReasons map[string]int `json:"refused_reasons,omitempty"`
	RefusalP50Ms   float64        `json:"refusal_p50_ms"`
	RefusalP99Ms   float64        `json:"refusal_p99_ms"`
	// AgentsStopped counts agents whose Run ended with an error during the
	// run (their steps then wait for the supervisor); AgentError is the first.
	AgentsStopped   int     `json:"agents_stopped"`
	AgentError      string  `json:"agent_error,omitempty"`
	DurationSec     float64 `json:"duration_sec"`
	TasksPerSec     float64 `json:"tasks_per_sec"`
	P50Ms           float64 `json:"p50_ms"`
	P95Ms           float64 `json:"p95_ms"`
	P99Ms           float64 `json:"p99_ms"`
	MaxMs           float64 `json:"max_ms"`
	QueueWaitP50Ms  float64 `json:"queue_wait_p50_ms"`
	QueueWaitP99Ms  float64 `json:"queue_wait_p99_ms"`
	DispatchP50Ms   float64 `json:"dispatch_p50_ms"`
	DispatchP99Ms   float64 `json:"dispatch_p99_ms"`
	EtcdTxnsPerTask float64 `json:"etcd_txns_per_task"`
	// EtcdBytesPerTask, EtcdOpsPerTask and EtcdPutBytesPerTask are what one
	// etcd member wrote during the load per completed task: bytes appended
	// to its write-ahead log (etcd_disk_wal_write_bytes_total: raft entries
	// with their framing, and raft hard states), key writes applied (puts
	// plus deletes, etcd_mvcc_put_total + etcd_mvcc_delete_total) and the
	// key and value bytes of those puts
	// (etcd_debugging_mvcc_total_put_size_in_bytes). Every member writes
	// the same log; a running target's are read from the /metrics of its
	// leader among EtcdEndpoints (the first endpoint when none is).
	EtcdBytesPerTask    float64 `json:"etcd_bytes_per_task"`
	EtcdOpsPerTask      float64 `json:"etcd_ops_per_task"`
	EtcdPutBytesPerTask float64 `json:"etcd_put_bytes_per_task"`
	EtcdDBStartMB       float64 `json:"etcd_db_start_mb,omitempty"`
	EtcdDBMaxMB         float64 `json:"etcd_db_max_mb,omitempty"`
	EtcdDBEndMB         float64 `json:"etcd_db_end_mb,omitempty"`
	// EtcdDBInUseMB is the part of etcd's database in use (not free pages
	// left by compaction) every 10 s of the run: flat when retention and
	// compaction keep up.
	EtcdDBInUseMB    []float64 `json:"etcd_db_in_use_mb,omitempty"`
	ProcessCPUSec    float64   `json:"process_cpu_sec,omitempty"`
	ProcessPeakRSSMB float64   `json:"process_peak_rss_mb,omitempty"`
	ServerCPUSec     float64   `json:"server_cpu_sec,omitempty"`
	ServerPeakRSSMB  float64   `json:"server_peak_rss_mb,omitempty"`
	// Windows gives the latency of the tasks completed in each 5 s of the
	// run, in order, empty windows included.
	Windows []Window `json:"windows"`
	// AllocsPerTask and AllocBytesPerTask are the Go heap allocations of
	// this process during the load (runtime.MemStats Mallocs and TotalAlloc
	// deltas) per completed task; GCCPUFraction is the share of the Go
	// CPU time of the process the runtime spent in garbage collection
	// (runtime/metrics /cpu/classes), and GCCycles how many GC cycles ran.
	// Embedded mode only: then they cover etcd, the scheduler and the load
	// generator, which share the process.
	AllocsPerTask     float64  `json:"allocs_per_task,omitempty"`
	AllocBytesPerTask float64  `json:"alloc_bytes_per_task,omitempty"`
	GCCPUFraction     *float64 `json:"gc_cpu_fraction,omitempty"` // set in embedded mode, even when 0
	GCCycles          int      `json:"gc_cycles,omitempty"`
	// Flood is set when the run had a quota (Config.QuotaBytes).
	Flood *FloodReport `json:"flood,omitempty"`

	// Archive tells whether the run had an archive (Config.ArchiveDSN);
	// ArchiveDSN is its DSN without passwords ("pg: postgres://…" for a
	// throwaway server).
	Archive    bool   `json:"archive"`
	ArchiveDSN string `json:"archive_dsn,omitempty"`
	// ArchiveTasks is how many tasks the archive gained during the run
	// (from the load's start to the report, after ArchiveWait), and
	// ArchiveBytesPerTask how much its size on disk (archive.Stats: table
	// and indexes) grew per task gained.
	ArchiveTasks        int64   `json:"archive_tasks"`
	ArchiveBytesPerTask float64 `json:"archive_bytes_per_task"`
	// ArchiveWaitSec is how long the run waited after the load for the
	// tasks to move to the archive (Config.ArchiveWait).
	ArchiveWaitSec float64 `json:"archive_wait_sec,omitempty"`
	// EtcdTasksAtEnd is how many task records etcd holds at the report
	// (after ArchiveWait), EtcdDBInUseEndMB the part of its database in
	// use then, and EtcdInUseBytesPerTask their ratio (0 when no task is
	// left): the etcd bytes a task costs while it is kept there.
	EtcdTasksAtEnd        int64   `json:"etcd_tasks_at_end"`
	EtcdDBInUseEndMB      float64 `json:"etcd_db_in_use_end_mb"`
	EtcdInUseBytesPerTask float64 `json:"etcd_in_use_bytes_per_task"`
	// LostChecked is how many acknowledged tasks were looked up after the
	// load (Config.VerifyLost), LostSample "all" or "random" (a random
	// LostSample of them when more than LostCheckAll were acknowledged),
	// and Lost how many of those were neither in etcd nor in the archive;
	// FirstLost names one.
	LostChecked int    `json:"lost_checked,omitempty"`
	LostSample  string `json:"lost_sample,omitempty"`
	Lost        int    `json:"lost"`
	FirstLost   string `json:"first_lost,omitempty"`
}

// FloodReport is the outcome of a flood against a small etcd quota: did
// admission refuse what etcd could not hold, and did everything it
// accepted finish?
type FloodReport struct {
	QuotaBytes int64 `json:"quota_bytes"`
	// Accepted counts submissions that succeeded, Refused those refused
	// with RESOURCE_EXHAUSTED, Completed the accepted tasks that ended
	// (succeeded or not) by the end of the drain, and Lost the accepted
	// ones that did not.
	Accepted  int `json:"accepted"`
	Refused   int `json:"refused"`
	Completed int `json:"completed"`
	Lost      int `json:"lost"`
	// NoSpaceRaised tells whether etcd's NOSPACE alarm was seen at any
	// time (the alarm list is read every second), NoSpaceAtEnd whether it
	// was still raised after the drain.
	NoSpaceRaised bool `json:"nospace_raised"`
	NoSpaceAtEnd  bool `json:"nospace_at_end"`
	// PeakDBFraction is the largest database file size seen (sampled every
	// second) over the quota; PeakInUseFraction the same for the part in
	// use.
	PeakDBFraction    float64 `json:"peak_db_fraction"`
	PeakInUseFraction float64 `json:"peak_in_use_fraction"`
}

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
	go func() { watching <- followEnded(watchCtx, st, arch, rev, done) }()

	startIndex, err := tg.applied(ctx)
	if err != nil {
		return nil, err
	}
	startCounters, err := tg.counters(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var arch0 archive.Stats
	if arch != nil {
		if arch0, err = arch.Stats(ctx); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
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
	if err := reportArchive(ctx, cfg, tg, arch, arch0, counts, rep); err != nil {
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

// load submits cfg.Tasks tasks, closed or open loop, and returns the
// submit-to-completed latency of each completed task.
func load(ctx context.Context, cfg Config, c reevev1.SchedulerServiceClient, wf string, done *completions, wins *windows) (latencies []time.Duration, counts submitCounts, errs int, firstErr error) {
	var (
		mu   sync.Mutex
		next atomic.Int64
		wg   sync.WaitGroup
	)
	runID := fmt.Sprintf("%x", time.Now().UnixNano())
	counts.runID = runID
	keepAcked := cfg.VerifyLost || cfg.ArchiveDSN != ""
	stopAt := time.Now().Add(cfg.Duration)
	over := func() bool { return cfg.Duration > 0 && time.Now().After(stopAt) }
	one := func(i int64) {
		id := taskID(runID, i)
		ch := done.expect(id)
		var (
			began time.Time
			err   error
		)
		for {
			began = time.Now()
			_, err = c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: wf}}})
			if status.Code(err) != codes.ResourceExhausted {
				break
			}
			// Refused (shedding, a limit): counted apart from errors and
			// latencies. Open loop drops the task; a closed-loop submitter
			// waits as a client backing off would, and sends it again.
			mu.Lock()
			counts.refuse(refusalReason(err), time.Since(began))
			mu.Unlock()
			wins.refused()
			if cfg.Rate > 0 {
				done.forget(id)
				return
			}
			backoff, ok := agentsdk.RetryDelay(err)
			if !ok || cfg.QuotaBytes > 0 {
				backoff = floodBackoff
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			if cfg.QuotaBytes > 0 || ctx.Err() != nil || over() {
				done.forget(id)
				return
			}
		}
		if err == nil {
			mu.Lock()
			counts.accepted++
			if keepAcked {
				counts.acked = append(counts.acked, i)
			}
			mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				err = fmt.Errorf("task %s not completed (%s): %w", id, describe(c, id), ctx.Err())
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs++
			if firstErr == nil {
				firstErr = err
			}
			return
		}
		lat := time.Since(began)
		latencies = append(latencies, lat)
		wins.add(lat)
	}
	if cfg.Rate > 0 {
		// Submission i is due at start + i/rate; a late loop catches up at
		// once (a ticker would drop ticks under load and lower the rate).
		start := time.Now()
		for i := int64(0); i < int64(cfg.Tasks); i++ {
			due := start.Add(time.Duration(float64(i) / cfg.Rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
					wg.Wait()
					return nil, counts, errs, ctx.Err()
				case <-time.After(d):
				}
			}
			if over() || ctx.Err() != nil {
				break
			}
			wg.Go(func() { one(i) })
		}
	} else {
		for range cfg.Concurrency {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= int64(cfg.Tasks) || ctx.Err() != nil || over() {
						return
					}
					one(i)
				}
			})
		}
	}
	wg.Wait()
	return latencies, counts, errs, firstErr
}

// floodBackoff is how long a closed-loop submitter waits after a refusal
// without a RetryInfo delay.
const floodBackoff = 20 * time.Millisecond

// submitCounts counts the outcomes of submissions.
type submitCounts struct {
	accepted, refused int
	reasons           map[string]int  // refusals by ErrorInfo reason
	refusalLat        []time.Duration // how long each refused call took
	// runID and acked name the acknowledged submissions (taskID), kept
	// for the lost check (Config.VerifyLost, or an archive).
	runID string
	acked []int64
}

func (c *submitCounts) refuse(reason string, lat time.Duration) {
	c.refused++
	if c.reasons == nil {
		c.reasons = map[string]int{}
	}
	c.reasons[reason]++
	c.refusalLat = append(c.refusalLat, lat)
}

// refusalReason is the ErrorInfo reason of a refusal, or its code's name.
func refusalReason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return status.Code(err).String()
}

// taskID is the id of the run's submission i.
func taskID(runID string, i int64) string { return fmt.Sprintf("b-%s-%07d", runID, i) }

// alarmSampler reads etcd's alarm list every second and records whether
// NOSPACE was ever raised.
type alarmSampler struct {
	cli  *clientv3.Client
	seen bool
}

func (a *alarmSampler) nospace(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := a.cli.AlarmList(ctx)
	if err != nil {
		return false
	}
	for _, m := range resp.Alarms {
		if m.GetAlarm() == etcdserverpb.AlarmType_NOSPACE {
			return true
		}
	}
	return false
}

func (a *alarmSampler) start() (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if a.nospace(context.Background()) {
					a.seen = true
				}
			}
		}
	}()
	return func() { close(quit); <-done }
}

// end reads the alarm list once more, after the run.
func (a *alarmSampler) end(ctx context.Context) bool { return a.nospace(ctx) }

// describe summarizes a task's state, for the error about a task that did
// not complete.
func describe(c reevev1.SchedulerServiceClient, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
	if err != nil {
		return err.Error()
	}
	t := resp.GetTask()
	out := t.GetState().String()
	for _, s := range t.GetSteps() {
		out += fmt.Sprintf(" %s=%s#%d agent=%q by=%v", s.GetName(), s.GetState(), s.GetAttempt(), s.GetLockedByAgent(), s.GetCompleteBy().AsTime().Format(time.RFC3339Nano))
	}
	for _, h := range t.GetHistory() {
		out += fmt.Sprintf(" | %s %s", h.GetTime().AsTime().Format("15:04:05.000000"), h.GetKind())
	}
	return out
}

// followEnded reports ended tasks to done until ctx ends. When the watch
// breaks (under heavy load it can fall behind etcd's compaction, which
// cancels it) it follows again from the current revision and looks up once
// every task still waited for, so that no completion is missed; those found
// that way count as completed when found.
//
// With an archive (arch not nil), a task etcd no longer holds is looked up
// there: it ended and moved.
func followEnded(ctx context.Context, st *store.Store, arch archive.Archive, rev int64, done *completions) error {
	for {
		_ = st.WatchEnded(ctx, rev, done.finish)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
		cur, err := st.Revision(ctx)
		if err != nil {
			continue
		}
		rev = cur
		for _, id := range done.waitingIDs() {
			v, err := st.GetTask(ctx, "default", id)
			if store.IsNotFound(err) && arch != nil {
				if at, err := arch.Get(ctx, "default", id); err == nil {
					done.finish("default", id, at.State.String())
				}
				continue
			}
			if err != nil {
				continue
			}
			if state := v.Record.GetTask().GetState(); taskstate.TerminalTask(state) {
				done.finish("default", id, state.String())
			}
		}
	}
}

// completions connects the ended-task watch to the submitters.
type completions struct {
	mu       sync.Mutex
	waiting  map[string]chan struct{}
	ended    map[string]bool // ended before its submitter asked
	finished map[string]bool // reported once already
	failed   int
}

func newCompletions() *completions {
	return &completions{waiting: map[string]chan struct{}{}, ended: map[string]bool{}, finished: map[string]bool{}}
}

func (c *completions) waitingIDs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Collect(maps.Keys(c.waiting))
}

func (c *completions) expect(id string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	if c.ended[id] {
		close(ch)
		return ch
	}
	c.waiting[id] = ch
	return ch
}

func (c *completions) finish(_, id, state string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished[id] {
		return
	}
	c.finished[id] = true
	if state != reevev1.TaskState_TASK_STATE_SUCCEEDED.String() {
		c.failed++
	}
	if ch, ok := c.waiting[id]; ok {
		close(ch)
		delete(c.waiting, id)
		return
	}
	c.ended[id] = true
}

// forget drops a task that will never exist (its submission was refused).
func (c *completions) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waiting, id)
}

func (c *completions) failedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// startAgents runs no-op agents that record how long after its dispatch
// each step reached them. Each agent is given every scheduler of sched and
// starts at a random one (see agentsdk), so that they spread over them.
func startAgents(cfg Config, sched dial.Config, dispatch *samples, errs *agentErrors) (stop func(), err error) {
	addrs, err := dial.Addresses(sched.Address)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := sched.TLSConfig()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range cfg.Agents {
		opts := []agentsdk.Option{agentsdk.WithAgentID(fmt.Sprintf("bench-%d", i)),
			agentsdk.WithMaxConcurrentSteps(cfg.AgentConcurrency), agentsdk.WithLogger(cfg.Log)}
		if tlsCfg != nil {
			opts = append(opts, agentsdk.WithTLS(tlsCfg))
		}
		if sched.Token != "" {
			opts = append(opts, agentsdk.WithToken(sched.Token))
		}
		a, err := agentsdk.New(addrs, opts...)
		if err != nil {
			cancel()
			wg.Wait()
			return nil, err
		}
		a.Handle("bench.noop", func(ctx context.Context, s *agentsdk.Step) (any, error) {
			if dl, ok := ctx.Deadline(); ok {
				// complete-by = dispatch time + the step's one-minute timeout.
				dispatch.add(time.Since(dl.Add(-time.Minute)))
			}
			if cfg.Work > 0 {
				time.Sleep(cfg.Work)
			}
			return nil, nil
		})
		wg.Go(func() {
			if err := a.Run(ctx); err != nil && ctx.Err() == nil {
				errs.add(fmt.Errorf("agent bench-%d stopped: %w", i, err))
			}
		})
	}
	return func() { cancel(); wg.Wait() }, nil
}

// agentErrors collects the errors agents stopped with.
type agentErrors struct {
	mu    sync.Mutex
	n     int
	first error
}

func (e *agentErrors) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if e.first == nil {
		e.first = err
	}
}

func (e *agentErrors) report() (int, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.first == nil {
		return e.n, ""
	}
	return e.n, e.first.Error()
}

// dbSampler records etcd's database size every second of the run, and the
// part in use every 10 seconds.
type dbSampler struct {
	size             func() (total, inUse int64)
	start0, max, end int64
	maxInUse         int64
	inUse            []int64
}

func (d *dbSampler) start() (stop func()) {
	if d.size == nil {
		return func() {}
	}
	var used int64
	d.start0, used = d.size()
	d.max, d.maxInUse = d.start0, used
	d.inUse = append(d.inUse, used)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-quit:
				return
			case <-t.C:
				total, used := d.size()
				d.max = max(d.max, total)
				d.maxInUse = max(d.maxInUse, used)
				if n%10 == 0 {
					d.inUse = append(d.inUse, used)
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		var used int64
		d.end, used = d.size()
		d.max = max(d.max, d.end)
		d.maxInUse = max(d.maxInUse, used)
		d.inUse = append(d.inUse, used)
	}
}

func (d *dbSampler) report() (startMB, maxMB, endMB float64, inUseMB []float64) {
	mb := func(b int64) float64 { return math.Round(float64(b)/(1<<20)*10) / 10 }
	for _, u := range d.inUse {
		inUseMB = append(inUseMB, mb(u))
	}
	return mb(d.start0), mb(d.max), mb(d.end), inUseMB
}

// samples is a concurrency-safe list of durations.
type samples struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *samples) add(d time.Duration) {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
}

func (s *samples) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.d)
}

// queueWaitSample bounds how many tasks queueWaits reads back.
const queueWaitSample = 20000

// queueWaits reads back the run's tasks (the first queueWaitSample in id
// order, which is submission order) and returns, for every step, how long
// it waited in the ready queue (ready to dispatched).
func queueWaits(ctx context.Context, st *store.Store) ([]time.Duration, error) {
	var out []time.Duration
	after := ""
	for read := 0; read < queueWaitSample; read += 1000 {
		tasks, more, err := st.ListTasks(ctx, "default", after, 1000)
		if err != nil {
			return nil, err
		}
		for _, t := range tasks {
			after = t.GetId()
			if t.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
				continue
			}
			ready := map[string]time.Time{}
			for _, h := range t.GetHistory() {
				switch h.GetKind() {
				case "step.ready":
					ready[h.GetStep()] = h.GetTime().AsTime()
				case "step.dispatched":
					if r, ok := ready[h.GetStep()]; ok {
						out = append(out, h.GetTime().AsTime().Sub(r))
					}
				}
			}
		}
		if !more {
			return out, nil
		}
	}
	return out, nil
}

func percentiles(d []time.Duration) (p50, p95, p99, maxMs float64) {
	if len(d) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(d)
	at := func(q float64) float64 {
		i := min(len(d)-1, int(q*float64(len(d))))
		return float64(d[i]) / float64(time.Millisecond)
	}
	return at(0.50), at(0.95), at(0.99), float64(d[len(d)-1]) / float64(time.Millisecond)
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func peakRSSMB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024 // Linux reports KiB
}

func dialTarget(cfg Config) (*target, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.EtcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: cfg.EtcdTLS, Username: cfg.EtcdUsername, Password: cfg.EtcdPassword})
	if err != nil {
		return nil, err
	}
	return &target{
		sched: cfg.Schedulers,
		etcd:  cli,
		dbSize: func() (total, inUse int64) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := cli.Status(ctx, cfg.EtcdEndpoints[0])
			if err != nil {
				return 0, 0
			}
			return st.DbSize, st.DbSizeInUse
		},
		applied: func(ctx context.Context) (uint64, error) {
			st, err := cli.Status(ctx, cfg.EtcdEndpoints[0])
			if err != nil {
				return 0, err
			}
			return st.RaftIndex, nil
		},
		counters: remoteCounters(cli, cfg),
		close:    func() { _ = cli.Close() },
	}, nil
}

// remoteCounters reads the write counters from the /metrics of the leader
// among cfg.EtcdEndpoints (the first endpoint when none is), chosen at the
// first read and kept for the next: every member writes the same raft log,
// so one member's counters are what each member writes, and the leader is
// the member that bounds throughput.
func remoteCounters(cli *clientv3.Client, cfg Config) func(context.Context) (etcdCounters, error) {
	var tlsCfg *tls.Config
	if cfg.EtcdTLS != nil {
		tlsCfg = cfg.EtcdTLS.Clone()
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	url := ""
	return func(ctx context.Context) (etcdCounters, error) {
		if url == "" {
			ep := cfg.EtcdEndpoints[0]
			for _, e := range cfg.EtcdEndpoints {
				if st, err := cli.Status(ctx, e); err == nil && st.Leader == st.Header.GetMemberId() {
					ep = e
					break
				}
			}
			url = metricsURL(ep, cfg.EtcdTLS)
		}
		return scrapeEtcdCounters(ctx, hc, url)
	}
}
