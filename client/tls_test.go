package client_test

import (
	"context"
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/client"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/auth"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

const clientToken = "client-token-0123456789abcdef"

// Over mutual TLS a client certificate of namespace default submits and
// waits; so does a bearer token; an operator's action needs an admin; a
// plaintext client is not served, and Dial refuses a token without TLS.
func TestOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	grant := func(g string) []*url.URL { u, _ := url.Parse(g); return []*url.URL{u} }
	if _, err := tlsconfig.Init(dir, []tlsconfig.CertSpec{
		{Name: "server", Server: true},
		{Name: "admin", URIs: grant("reeve://admin/default")},
		{Name: "agent", URIs: grant("reeve://agent/default")},
		{Name: "client", URIs: grant("reeve://client/default")},
	}, tlsconfig.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.ParseTokens([]byte("tokens:\n  - name: ci\n    token: " + clientToken + "\n    grants: [\"reeve://client/default\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	pem := func(name string) (string, string) {
		return filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	}
	ca := filepath.Join(dir, "ca.pem")
	cert, key := pem("server")
	cfg, err := tlsconfig.Server(tlsconfig.Files{CA: ca, Cert: cert, Key: key}, false)
	if err != nil {
		t.Fatal(err)
	}
	a := auth.New(auth.Config{Certificates: true, Tokens: tokens})
	s := testenv.New(t).StartSchedulerGRPC("", append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}, a.ServerOptions()...))
	cert, key = pem("agent")
	startAgent(t, []string{s.Addr}, map[string]agentsdk.HandlerFunc{
		"tls.echo": func(_ context.Context, st *agentsdk.Step) (any, error) { return st.RawInput(), nil },
	}, agentsdk.WithTLSFiles(agentsdk.TLSFiles{CA: ca, Cert: cert, Key: key}))

	dialAs := func(name string, opts ...client.Option) *client.Client {
		t.Helper()
		f := client.TLSFiles{CA: ca}
		if name != "" {
			f.Cert, f.Key = pem(name)
		}
		c, err := client.Dial(s.Addr, append([]client.Option{client.WithTLSFiles(f)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	admin := dialAs("admin")
	if _, err := admin.SchedulerService().RegisterWorkflow(ctx(t), &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{
		Name: "echo", Steps: []*reevev1.StepSpec{step("echo", "tls.echo")},
	}}); err != nil {
		t.Fatalf("register as admin: %v", err)
	}
	for name, c := range map[string]*client.Client{"client certificate": dialAs("client"), "token": dialAs("", client.WithToken(clientToken))} {
		run, err := c.Submit(ctx(t), "echo", map[string]string{"by": name})
		if err != nil {
			t.Fatalf("%s: submit: %v", name, err)
		}
		var out struct{ Echo struct{ By string } }
		if err := run.Get(ctx(t), &out); err != nil || out.Echo.By != name {
			t.Fatalf("%s: Get: %+v, %v", name, out, err)
		}
		if _, err := run.Fail(ctx(t), "not mine to fail"); status.Code(errors.Unwrap(err)) != codes.PermissionDenied {
			t.Fatalf("%s: Fail: %v; want PERMISSION_DENIED (operators only)", name, err)
		}
	}

	plain, err := client.Dial(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Submit(ctx(t), "echo", nil); status.Code(errors.Unwrap(err)) != codes.Unavailable ||
		!strings.Contains(err.Error(), "hint: the scheduler may serve TLS: set client.WithTLSFiles") {
		t.Fatalf("plaintext submit to a TLS scheduler: %v; want UNAVAILABLE with the hint to set client.WithTLSFiles", err)
	}
	if _, err := client.Dial(s.Addr, client.WithToken(clientToken)); err == nil {
		t.Fatal("Dial with a token and no TLS succeeded; want an error (gRPC never sends tokens in plaintext)")
	}
}

// A TLS client of a plaintext scheduler is told, in the error, that the
// scheduler serves plaintext.
func TestTLSClientOfAPlaintextSchedulerIsToldWhy(t *testing.T) {
	dir := t.TempDir()
	if _, err := tlsconfig.Init(dir, []tlsconfig.CertSpec{{Name: "server", Server: true}}, tlsconfig.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	s := testenv.New(t).StartScheduler("")
	c, err := client.Dial(s.Addr, client.WithTLSFiles(client.TLSFiles{CA: filepath.Join(dir, "ca.pem")}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.GetRun("t-1").Task(ctx(t)); status.Code(errors.Unwrap(err)) != codes.Unavailable ||
		!strings.Contains(err.Error(), "hint: the scheduler serves plaintext: drop client.WithTLSFiles") {
		t.Fatalf("TLS client of a plaintext scheduler: %v; want UNAVAILABLE with the hint to drop client.WithTLSFiles", err)
	}
}
