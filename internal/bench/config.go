package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/reeve-org/reeve/internal/archive"
	"github.com/reeve-org/reeve/internal/dial"
	"github.com/reeve-org/reeve/internal/pgserver"
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
	// MaxRunning, when positive, is a max_running limit on the bench's
	// step type (bench.noop), set through QueueService before the run
	// (issue 36; the identity needs the admin role); 0: no limit.
	MaxRunning int
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

// ArchivePG is the Config.ArchiveDSN that starts a throwaway PostgreSQL
// server for the run (internal/pgserver: initdb and pg_ctl in a temporary
// directory, as the user postgres when root), removed at the end. Followed
// by ?PARAMS, the parameters are added to the server's DSN
// (pg?pool_max_conns=32).
const ArchivePG = "pg"

// throwawayPG tells whether dsn is ArchivePG, alone or followed by
// ?PARAMS for the connection (pg?pool_max_conns=32), and returns PARAMS.
func throwawayPG(dsn string) (params string, ok bool) {
	if dsn == ArchivePG {
		return "", true
	}
	return strings.CutPrefix(dsn, ArchivePG+"?")
}

// openArchive opens the archive dsn names (nil and a no-op close when dsn
// is empty); ArchivePG first starts a throwaway server. label is the DSN
// without passwords, for the report.
func openArchive(ctx context.Context, dsn string) (a archive.Archive, label string, closeAll func(), err error) {
	if dsn == "" {
		return nil, "", func() {}, nil
	}
	stopPG := func() {}
	label = archive.Redact(dsn)
	if params, ok := throwawayPG(dsn); ok {
		srv, err := pgserver.Launch()
		if err != nil {
			return nil, "", nil, fmt.Errorf("start a throwaway PostgreSQL server for the archive: %w", err)
		}
		dsn, stopPG = srv.DSN("postgres"), srv.Close
		if params != "" {
			dsn += "&" + params
		}
		label = "pg: " + dsn
	}
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	a, err = archive.Open(octx, dsn)
	if err != nil {
		stopPG()
		return nil, "", nil, fmt.Errorf("archive %s: %w", label, err)
	}
	return a, label, func() { _ = a.Close(); stopPG() }, nil
}
