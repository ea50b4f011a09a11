package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"time"

	"google.golang.org/grpc"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// Config configures a Suite. The zero value is ready to use.
type Config struct {
	// Listen is the address the suite serves the agent protocol on; default
	// "127.0.0.1:0" (a free loopback port).
	Listen string
	// ConnectTimeout bounds the wait for the agent's first connection;
	// default 60s (enough to start an interpreter or build an agent).
	ConnectTimeout time.Duration
	// Run selects the cases whose name matches; all when nil.
	Run *regexp.Regexp
	// Log receives the suite's progress; default: discarded.
	Log *slog.Logger
	// ServerOptions are added to the suite's gRPC server: TLS credentials
	// and the authorizer's interceptors for a run in secure mode (the agent
	// then needs a certificate with an agent grant). Default: plaintext.
	ServerOptions []grpc.ServerOption
}

// Suite is a conformance run: a loopback AgentService the agent under test
// connects to, and the cases it drives the agent through.
type Suite struct {
	cfg Config
	srv *server
}

// Listen starts serving the agent protocol on cfg.Listen. Close it when done.
func Listen(cfg Config) (*Suite, error) {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 60 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv, err := startServer(cfg.Listen, cfg.ServerOptions)
	if err != nil {
		return nil, fmt.Errorf("conformance: listen on %s: %w", cfg.Listen, err)
	}
	return &Suite{cfg: cfg, srv: srv}, nil
}

// Addr is the host:port the agent under test must connect to.
func (s *Suite) Addr() string { return s.srv.lis.Addr().String() }

// Close stops serving; streams still open end with UNAVAILABLE.
func (s *Suite) Close() { s.srv.stop() }

// Process is an agent under test that the suite started. With it the suite
// notices an agent that died, and checks graceful shutdown.
type Process interface {
	// Stop asks the agent to shut down gracefully (SIGTERM for a command).
	Stop()
	// Exited is closed once the agent has exited.
	Exited() <-chan struct{}
	// Err is how the agent exited (nil: success), once Exited is closed.
	Err() error
}

// Cases lists the names of the suite's cases, in the order they run.
func Cases() []string {
	out := make([]string, len(cases))
	for i, c := range cases {
		out[i] = c.name
	}
	return out
}

// Run drives the agent through the selected cases and reports. proc is the
// agent when the suite started it, nil for an agent started elsewhere (the
// shutdown case is then skipped). Run calls a case failed, never returns an
// error: a missing connection fails the cases that need one. It is not safe
// to call Run twice on one Suite.
func (s *Suite) Run(ctx context.Context, proc Process) *Report {
	d := newDriver(ctx, s, proc)
	defer d.closeSession()
	rep := &Report{Address: s.Addr(), Passed: true}
	for _, c := range cases {
		if s.cfg.Run != nil && !s.cfg.Run.MatchString(c.name) {
			continue
		}
		r := d.runCase(c)
		rep.Cases = append(rep.Cases, r)
		if ctx.Err() != nil {
			break
		}
	}
	// Violations seen after a case ended (a result that came late, a
	// refused result listed as running) belong to that case.
	for i := range rep.Cases {
		r := &rep.Cases[i]
		if late := d.late[r.Name]; len(late) > 0 {
			r.Failures = append(r.Failures, late...)
			r.Result = Fail
		}
		if r.Result == Fail {
			rep.Passed = false
		}
	}
	if d.reg != nil {
		rep.AgentID = d.reg.GetAgentId()
		rep.StepTypes = d.reg.GetStepTypes()
	}
	return rep
}

// caseRun is the state of one case while it runs.
type caseRun struct {
	name     string
	failures []string
	skip     string
}

func (c *caseRun) errorf(format string, args ...any) {
	c.failures = append(c.failures, fmt.Sprintf(format, args...))
}

// errCaseOver stops a case after a failure it cannot go on from.
var errCaseOver = errors.New("case over")

// fatalf records a failure and returns errCaseOver for the case to return.
func (c *caseRun) fatalf(format string, args ...any) error {
	c.errorf(format, args...)
	return errCaseOver
}

func (d *driver) runCase(c testCase) CaseResult {
	run := &caseRun{name: c.name}
	d.current = run
	start := time.Now()
	d.s.cfg.Log.Info("case started", "case", c.name)
	err := c.run(d, run)
	if err != nil && !errors.Is(err, errCaseOver) {
		run.errorf("%v", err)
	}
	r := CaseResult{Name: c.name, Description: c.desc, DurationMS: time.Since(start).Milliseconds(), Failures: run.failures, Result: Pass}
	switch {
	case len(run.failures) > 0:
		r.Result = Fail
	case run.skip != "":
		r.Result, r.Skipped = Skip, run.skip
	}
	d.s.cfg.Log.Info("case finished", "case", c.name, "result", r.Result, "failures", run.failures)
	return r
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func refKey(r *reevev1.StepRef) string {
	return fmt.Sprintf("%s/%s/%s/%d", r.GetNamespace(), r.GetTaskId(), r.GetStep(), r.GetAttempt())
}
