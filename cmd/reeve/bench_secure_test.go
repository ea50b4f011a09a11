package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/auth"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

// The production topology: `reeve bench` against two schedulers that
// require client certificates and check roles. The bench certificate holds
// what bench does: submit (client), serve the no-op steps (agent) and
// register the workflow (admin). Submissions go to both schedulers and
// every task succeeds.
func TestBenchRunsAgainstTwoSchedulersOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	uris := func(gs ...string) []*url.URL {
		var out []*url.URL
		for _, g := range gs {
			u, err := url.Parse(g)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, u)
		}
		return out
	}
	if _, err := tlsconfig.Init(dir, []tlsconfig.CertSpec{
		{Name: "server", Server: true},
		{Name: "bench", URIs: uris("reeve://client/default", "reeve://agent/default?step_types=bench.*&agent_ids=bench-*", "reeve://admin/default")},
	}, tlsconfig.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	p := func(n string) string { return filepath.Join(dir, n) }
	srvTLS, err := tlsconfig.Server(tlsconfig.Files{CA: p("ca.pem"), Cert: p("server.pem"), Key: p("server-key.pem")}, true)
	if err != nil {
		t.Fatal(err)
	}
	env := testenv.New(t)
	start := func() (*testenv.Scheduler, *atomic.Int64) {
		var submits atomic.Int64
		count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			if _, ok := req.(*reevev1.SubmitTaskRequest); ok && err == nil {
				submits.Add(1)
			}
			return resp, err
		}
		a := auth.New(auth.Config{Certificates: true})
		gopts := append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(srvTLS))}, a.ServerOptions()...)
		return env.StartSchedulerGRPC("", append(gopts, grpc.ChainUnaryInterceptor(count))), &submits
	}
	s1, n1 := start()
	s2, n2 := start()

	// Open loop at 40/s: the run lasts a second at least, time enough for
	// the round robin to have both schedulers ready.
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vars := map[string]string{"REEVE_TLS_CA": p("ca.pem"), "REEVE_TLS_CERT": p("bench.pem"), "REEVE_TLS_KEY": p("bench-key.pem")}
	code := run(ctx, []string{"bench", "--address", s1.Addr + "," + s2.Addr, "--etcd-endpoints", env.Etcd.Endpoints()[0],
		"--tasks", "40", "--rate", "40", "--agents", "2", "-o", "json"}, &out, &errOut, func(k string) string { return vars[k] })
	if code != 0 {
		t.Fatalf("bench over mutual TLS: exit %d: %s", code, errOut.String())
	}
	var rep map[string]any
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out.String())
	}
	if rep["completed"] != 40.0 || rep["failed"] != 0.0 || rep["errors"] != 0.0 || rep["agents_stopped"] != 0.0 {
		t.Fatalf("completed %v, failed %v, errors %v (%v), agents stopped %v (%v); want 40 completed and nothing else",
			rep["completed"], rep["failed"], rep["errors"], rep["first_error"], rep["agents_stopped"], rep["agent_error"])
	}
	if a, b := n1.Load(), n2.Load(); a == 0 || b == 0 || a+b != 40 {
		t.Fatalf("submissions accepted by the schedulers: %d and %d; want both some, 40 in all", a, b)
	}
}
