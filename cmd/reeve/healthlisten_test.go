package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/reeve-org/reeve/internal/etcdtest"
)

// waitHealth polls the gRPC health service at addr until it reports want,
// or fails the test after a generous bound.
func waitHealth(t *testing.T, addr, service string, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		cancel()
		if err == nil && resp.GetStatus() == want {
			return
		}
		last = resp.GetStatus().String()
		if err != nil {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("health at %s: last %s, want %s", addr, last, want)
}

// healthAddrLine finds the address in the "health listening" log line.
var healthAddrLine = regexp.MustCompile(`health listening.*?address[=":]+(127\.0\.0\.1:\d+)`)

// healthAddr waits for the command's "health listening" log line and
// returns the address it names: the listener is opened on port 0, so no
// other test can take the port between choosing it and binding it.
func healthAddr(t *testing.T, out, errOut *lockedBuffer, done <-chan int) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := healthAddrLine.FindStringSubmatch(errOut.String() + out.String()); m != nil {
			return m[1]
		}
		select {
		case code := <-done:
			t.Fatalf("exited %d before serving health:\n%s%s", code, out.String(), errOut.String())
		default:
		}
	}
	t.Fatalf("no 'health listening' log line within 30s:\n%s%s", out.String(), errOut.String())
	return ""
}

// Kubernetes' grpc probes speak plaintext only: --health-listen serves the
// scheduler's and the supervisor's health on a plaintext port of its own.
func TestHealthListen(t *testing.T) {
	m := etcdtest.New(t)
	ep := m.Endpoints()[0]
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"scheduler", []string{"scheduler", "--etcd-endpoints", ep, "--listen", "127.0.0.1:0"}},
		{"supervisor", []string{"supervisor", "--etcd-endpoints", ep, "--schedulers", "127.0.0.1:1", "--session-ttl", "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			// The supervisor's goroutines may still log after run returns.
			var out, errOut lockedBuffer
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, append(tc.args, "--health-listen", "127.0.0.1:0"), &out, &errOut, func(string) string { return "" })
			}()
			health := healthAddr(t, &out, &errOut, done)
			waitHealth(t, health, "", healthpb.HealthCheckResponse_SERVING)
			waitHealth(t, health, "liveness", healthpb.HealthCheckResponse_SERVING)
			cancel()
			select {
			case code := <-done:
				if code != 0 {
					t.Fatalf("exit %d: %s", code, errOut.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("did not stop within 30s of its context ending")
			}
		})
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// While etcd is down a scheduler is not ready ("" NOT_SERVING: no traffic)
// but alive ("liveness" SERVING: no restart, which would not mend etcd).
func TestHealthListenEtcdDownNotReadyButAlive(t *testing.T) {
	m := etcdtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"scheduler", "--etcd-endpoints", m.Endpoints()[0], "--listen", "127.0.0.1:0", "--health-listen", "127.0.0.1:0"}, &out, &errOut, func(string) string { return "" })
	}()
	health := healthAddr(t, &out, &errOut, done)
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("scheduler did not stop within 30s")
		}
	}()
	waitHealth(t, health, "", healthpb.HealthCheckResponse_SERVING)
	m.Stop()
	waitHealth(t, health, "", healthpb.HealthCheckResponse_NOT_SERVING)
	waitHealth(t, health, "liveness", healthpb.HealthCheckResponse_SERVING)
	m.Restart()
	waitHealth(t, health, "", healthpb.HealthCheckResponse_SERVING)
}

func TestHealthListenBadAddress(t *testing.T) {
	m := etcdtest.New(t)
	code, _, errOut := reeve(t, "", "supervisor", "--etcd-endpoints", m.Endpoints()[0], "--schedulers", "127.0.0.1:1", "--health-listen", "256.0.0.1:x")
	if code == 0 || !strings.Contains(errOut, "--health-listen") {
		t.Fatalf("exit %d, stderr %q: want a failure naming --health-listen", code, errOut)
	}
}
