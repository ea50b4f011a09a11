package conformance

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// sdkAgent runs a Go SDK agent in-process as the agent under test.
type sdkAgent struct {
	stop   context.CancelFunc
	exited chan struct{}
	err    error
}

func startSDKAgent(t *testing.T, addr string) *sdkAgent {
	t.Helper()
	a, err := agentsdk.New([]string{addr}, agentsdk.WithAgentID("go-sdk"), agentsdk.WithLogger(testenv.Logger()), agentsdk.WithShutdownTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	Handle(a)
	ctx, stop := context.WithCancel(context.Background())
	p := &sdkAgent{stop: stop, exited: make(chan struct{})}
	go func() { p.err = a.Run(ctx); close(p.exited) }()
	t.Cleanup(func() { stop(); <-p.exited })
	return p
}

func (p *sdkAgent) Stop()                   { p.stop() }
func (p *sdkAgent) Exited() <-chan struct{} { return p.exited }
func (p *sdkAgent) Err() error              { return p.err }

func listen(t *testing.T, run string) *Suite {
	t.Helper()
	cfg := Config{ConnectTimeout: 10 * time.Second, Log: testenv.Logger()}
	if run != "" {
		cfg.Run = regexp.MustCompile(run)
	}
	s, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func report(t *testing.T, r *Report) string {
	t.Helper()
	var b strings.Builder
	_ = r.WriteTable(&b)
	return b.String()
}

// The Go SDK passes every case, shutdown included.
func TestGoSDKAgentConforms(t *testing.T) {
	t.Parallel()
	s := listen(t, "")
	proc := startSDKAgent(t, s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := s.Run(ctx, proc)
	if !r.Passed || len(r.Cases) != len(Cases()) {
		t.Fatalf("Go SDK agent does not conform:\n%s", report(t, r))
	}
	for _, c := range r.Cases {
		if c.Result != Pass {
			t.Errorf("case %s: %s, want PASS", c.Name, c.Result)
		}
	}
	if r.AgentID != "go-sdk" {
		t.Errorf("agent id %q", r.AgentID)
	}
}

// A raw-stub agent without bugs passes every case that needs no process
// (shutdown is skipped for an agent the suite did not start).
func TestRawAgentConforms(t *testing.T) {
	t.Parallel()
	s := listen(t, "")
	runRaw(t, s, bugs{})
	r := s.Run(context.Background(), nil)
	if !r.Passed {
		t.Fatalf("raw agent does not conform:\n%s", report(t, r))
	}
	if last := r.Cases[len(r.Cases)-1]; last.Name != "shutdown" || last.Result != Skip {
		t.Fatalf("shutdown case %+v, want skipped", last)
	}
}

func runRaw(t *testing.T, s *Suite, b bugs) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	a := newRawAgent(s.Addr(), b)
	go func() { a.run(ctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
}

// Each protocol mistake fails the case that checks it, and only the cases
// where the mistake shows.
func TestSuiteCatchesMistakes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		bug  bugs
		run  string // cases to run
		fail []string
	}{
		{"results after complete_by", bugs{lateResults: true}, "^(register|deadline-passed|assignment)$", []string{"deadline-passed"}},
		{"canceled step reported", bugs{ignoreCancel: true}, "^(register|cancel)$", []string{"cancel"}},
		{"result lost on reconnect", bugs{forgetPending: true}, "^(register|redelivery)$", []string{"redelivery"}},
		{"refused result resent", bugs{resendRefused: true}, "^(register|refused-result|redelivery)$", []string{"refused-result"}},
		{"drain ignored", bugs{ignoreDrain: true}, "^(register|drain)$", []string{"drain"}},
		{"no heartbeats", bugs{noHeartbeat: true}, "^(register|heartbeat)$", []string{"heartbeat"}},
		{"agent id not stable", bugs{newIDs: true}, "^(register|redelivery)$", []string{"redelivery"}},
		{"wrong attempt reported", bugs{wrongAttempt: true}, "^(register|stale-attempt)$", []string{"stale-attempt"}},
		{"unknown message fatal", bugs{unknownFatal: true}, "^(register|unknown-message|assignment)$", []string{"unknown-message"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := listen(t, tt.run)
			runRaw(t, s, tt.bug)
			r := s.Run(context.Background(), nil)
			var failed []string
			for _, c := range r.Cases {
				if c.Result == Fail {
					failed = append(failed, c.Name)
				}
			}
			if r.Passed || strings.Join(failed, ",") != strings.Join(tt.fail, ",") {
				t.Fatalf("failed cases %v, want %v:\n%s", failed, tt.fail, report(t, r))
			}
		})
	}
}

// An agent that never connects fails register quickly and every other case
// at once, without waiting for each.
func TestNoAgent(t *testing.T) {
	cfg := Config{ConnectTimeout: 300 * time.Millisecond, Log: testenv.Logger()}
	s, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	r := s.Run(context.Background(), nil)
	if r.Passed || r.Cases[0].Result != Fail || !strings.Contains(r.Cases[0].Failures[0], "did not connect") {
		t.Fatalf("report:\n%s", report(t, r))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}
