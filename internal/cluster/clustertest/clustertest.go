// Package clustertest finds the binaries that tests of real clusters need:
// the reeve binary, built once per test binary, and the pinned tools that
// `make etcd` and `make toxiproxy` install in .tools/bin.
package clustertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/cluster"
	"github.com/reeve-org/reeve/internal/tlsconfig"
	"github.com/reeve-org/reeve/internal/verify"
)

func root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// Tool returns the path of a tool in .tools/bin. When it is missing the test
// is skipped, unless REEVE_REQUIRE_BINARIES=1 (make test sets it): then it
// fails.
func Tool(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(root(), ".tools", "bin", name)
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("REEVE_REQUIRE_BINARIES") == "1" {
			t.Fatalf("%s missing (run 'make etcd toxiproxy'): %v", name, err)
		}
		t.Skipf("%s missing (run 'make etcd toxiproxy'): %v", name, err)
	}
	return p
}

var (
	buildOnce sync.Once
	buildDir  string
	reevePath string
	buildErr  error
	buildOut  []byte
)

// Main runs the tests and removes the reeve binaries built for them. Call
// it from TestMain: os.Exit(clustertest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	for _, dir := range []string{buildDir, releasedDir} {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
	}
	return code
}

var (
	releasedOnce sync.Once
	releasedDir  string
	releasedPath string
	releasedErr  error
	releasedGone bool // git or the commit is missing: skip (see Released)
)

// ReleasedCommit returns the commit of the last release: the first line of
// the file RELEASED at the repository's root that is not a comment.
func ReleasedCommit() (string, error) {
	b, err := os.ReadFile(filepath.Join(root(), "RELEASED"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return line, nil
		}
	}
	return "", errors.New("RELEASED names no commit")
}

// Released builds the reeve command of the last release (ReleasedCommit),
// from the repository's git history (git archive), once per test binary,
// and returns its path; Main removes it. It runs only where Reeve does
// (REEVE_CLUSTER_TESTS=1). Without git or the commit (a shallow clone) the
// test is skipped, saying so, also under REEVE_REQUIRE_BINARIES=1: the
// release cannot be built there. A release that does not build fails.
func Released(t testing.TB) string {
	t.Helper()
	if os.Getenv("REEVE_CLUSTER_TESTS") != "1" {
		t.Skip("starts a real cluster: set REEVE_CLUSTER_TESTS=1 (make test-cluster)")
	}
	releasedOnce.Do(func() {
		commit, err := ReleasedCommit()
		if err != nil {
			releasedErr = err
			return
		}
		dir, err := os.MkdirTemp("", "reeve-released-")
		if err != nil {
			releasedErr = err
			return
		}
		releasedDir = dir
		src := filepath.Join(dir, "src")
		if err := os.Mkdir(src, 0o755); err != nil {
			releasedErr = err
			return
		}
		archive := exec.Command("sh", "-c", `git archive --format=tar "$1" | tar -x -C "$2"`, "sh", commit, src)
		archive.Dir = root()
		if out, err := archive.CombinedOutput(); err != nil {
			releasedErr, releasedGone = fmt.Errorf("git archive %s: %v\n%s", commit, err, out), true
			return
		}
		releasedPath = filepath.Join(dir, "reeve")
		build := exec.Command("go", "build", "-o", releasedPath, "./cmd/reeve")
		build.Dir = src
		if out, err := build.CombinedOutput(); err != nil {
			releasedErr = fmt.Errorf("go build ./cmd/reeve of %s: %v\n%s", commit, err, out)
		}
	})
	if releasedErr != nil {
		if !releasedGone {
			t.Fatalf("the released reeve: %v", releasedErr)
		}
		t.Skipf("the released reeve cannot be built from this clone (a shallow one?): %v", releasedErr)
	}
	return releasedPath
}

// Reeve builds the reeve command once per test binary and returns its path;
// Main removes it.
// Tests of real clusters start many processes and load the machine, which
// would disturb timing-sensitive tests of other packages running in
// parallel: they run only with REEVE_CLUSTER_TESTS=1, which `make test`
// sets in a step of its own (`make test-cluster`). Otherwise Reeve skips
// the test.
func Reeve(t testing.TB) string {
	t.Helper()
	if os.Getenv("REEVE_CLUSTER_TESTS") != "1" {
		t.Skip("starts a real cluster: set REEVE_CLUSTER_TESTS=1 (make test-cluster)")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "reeve-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildDir = dir
		reevePath = filepath.Join(dir, "reeve")
		cmd := exec.Command("go", "build", "-o", reevePath, "./cmd/reeve")
		cmd.Dir = root()
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("go build ./cmd/reeve: %v\n%s", buildErr, buildOut)
	}
	return reevePath
}

// Verify fails t with every store invariant violation `reeve verify` finds
// in the cluster's etcd (orphan or disagreeing index keys, terminal tasks
// with live keys, tasks nothing will move). Call it at the end of a test,
// once its tasks have ended.
func Verify(ctx context.Context, t testing.TB, cli *clientv3.Client) {
	t.Helper()
	rep, err := verify.Check(ctx, cli, verify.Options{})
	if err != nil {
		t.Errorf("reeve verify: %v", err)
		return
	}
	for _, v := range rep.Violations {
		t.Errorf("reeve verify: %s %s/%s %s: %s", v.Kind, v.Namespace, v.TaskID, v.Key, v.Detail)
	}
	t.Logf("reeve verify: %d tasks, %d index keys, %d violations", rep.Tasks, rep.IndexKeys, len(rep.Violations))
}

// Start starts a cluster for a test and stops it when the test ends; when
// the test failed, it logs every process's log (schedulers, supervisors,
// agents, etcd members) first.
func Start(ctx context.Context, t testing.TB, cfg cluster.Config) *cluster.Cluster {
	t.Helper()
	c, err := cluster.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(15 * time.Second); err != nil {
			t.Errorf("stop: %v", err)
		}
		if t.Failed() {
			for _, p := range slices.Concat(c.Schedulers, c.Supervisors, c.Agents, c.Etcd) {
				b, _ := os.ReadFile(filepath.Join(cfg.Dir, "logs", p.Name+".log"))
				t.Logf("%s:\n%s", p.Name, b)
			}
		}
	})
	return c
}

// RequireSecure fails t unless the secure cluster c refuses what its
// configuration promises to: a plaintext call and a TLS call without a
// client certificate to each scheduler, an etcd client without a client
// certificate, and a workflow registration by the agent role.
func RequireSecure(ctx context.Context, t testing.TB, c *cluster.Cluster) {
	t.Helper()
	if !c.Secure() {
		t.Fatal("the cluster is not secure (cluster.Config.Secure)")
	}
	noCert, err := tlsconfig.Client(tlsconfig.Files{CA: c.Files(cluster.Client).CA}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range c.SchedulerAddrs {
		for what, creds := range map[string]credentials.TransportCredentials{
			"plaintext":                        insecure.NewCredentials(),
			"TLS without a client certificate": credentials.NewTLS(noCert),
		} {
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			// Fails fast: the handshake fails, and the call does not wait
			// for a ready connection.
			hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = healthpb.NewHealthClient(cc).Check(hctx, &healthpb.HealthCheckRequest{})
			cancel()
			_ = cc.Close()
			if err == nil {
				t.Errorf("scheduler %s answered a %s health check", addr, what)
			} else {
				t.Logf("refused as it should be: %s health check of %s: %v", what, addr, err)
			}
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.EtcdEndpoints, TLS: noCert, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := cli.Get(gctx, "reeve-secure-check"); err == nil {
		t.Errorf("etcd (%v) served a client without a client certificate", c.EtcdEndpoints)
	} else {
		t.Logf("refused as it should be: etcd read without a client certificate: %v", err)
	}
	dial, err := c.DialOptions(cluster.Agent)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(c.SchedulerAddrs[0], dial...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = reevev1.NewSchedulerServiceClient(cc).RegisterWorkflow(rctx, &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{Name: "secure-check"}})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("RegisterWorkflow as the agent role: %v, want PERMISSION_DENIED", err)
	}
}

// NoRefusedCalls fails t with every call of the secure cluster c's
// components that the role checks refused (see cluster.RefusedCalls): a
// call the system needs and the authorization table does not allow. The
// agents' refused registrations, which every secure cluster has, show that
// the schedulers' logs were read as they are written.
func NoRefusedCalls(t testing.TB, c *cluster.Cluster) {
	t.Helper()
	calls, err := c.RefusedCalls()
	if err != nil {
		t.Fatal(err)
	}
	var unexpected []string
	expected := 0
	for _, r := range calls {
		if r.Expected() {
			expected++
		} else {
			unexpected = append(unexpected, r.Scheduler+": "+r.Line)
		}
	}
	if expected == 0 {
		t.Errorf("no refused call found in the schedulers' logs, not even the agents' workflow registrations: the logs were not read right")
	}
	if len(unexpected) > 0 {
		t.Errorf("%d calls of the cluster's components were refused by the role checks; the first:\n%s", len(unexpected), strings.Join(unexpected[:min(len(unexpected), 5)], "\n"))
	}
}
