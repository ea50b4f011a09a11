package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/auth"
	"github.com/reeve-org/reeve/internal/demo"
	"github.com/reeve-org/reeve/internal/etcdtest"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

// reeveEnv runs the CLI with env as its environment.
func reeveEnv(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = run(ctx, args, &out, &errOut, func(k string) string { return env[k] })
	return code, out.String(), errOut.String()
}

func TestCertsInitWritesPerRoleCertificatesOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if code, _, errOut := reeveEnv(t, nil, "certs", "init", "--dir", dir, "--namespace", "pay"); code != 0 {
		t.Fatalf("certs init: exit %d: %s", code, errOut)
	}
	for _, n := range []string{"ca", "server", "admin", "supervisor", "agent", "client", "etcd-client"} {
		fi, err := os.Stat(filepath.Join(dir, n+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s-key.pem has mode %v, want 0600", n, fi.Mode().Perm())
		}
	}
	if code, _, errOut := reeveEnv(t, nil, "certs", "init", "--dir", dir); code != exitUsage || !strings.Contains(errOut, "--force") {
		t.Fatalf("second init: exit %d (%s), want a usage error suggesting --force", code, errOut)
	}
	code, out, _ := reeveEnv(t, nil, "certs", "token", "--name", "ci", "--grant", "reeve://client/pay")
	lines := strings.SplitN(out, "\n", 2)
	if code != 0 || len(lines) != 2 {
		t.Fatalf("certs token: exit %d, %q", code, out)
	}
	tokens, err := auth.ParseTokens([]byte(lines[1]))
	if err != nil || len(tokens) != 1 || strings.Contains(lines[1], lines[0]) {
		t.Fatalf("tokens file %q: %v", lines[1], err)
	}
}

func TestClientCommandsUseTLSAndRoles(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := reeveEnv(t, nil, "certs", "init", "--dir", dir); code != 0 {
		t.Fatalf("certs init: %s", errOut)
	}
	p := func(n string) string { return filepath.Join(dir, n) }
	srv, err := tlsconfig.Server(tlsconfig.Files{CA: p("ca.pem"), Cert: p("server.pem"), Key: p("server-key.pem")}, true)
	if err != nil {
		t.Fatal(err)
	}
	a := auth.New(auth.Config{Certificates: true})
	s := testenv.New(t).StartSchedulerGRPC("", append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(srv))}, a.ServerOptions()...))
	as := func(name string) map[string]string {
		return map[string]string{"REEVE_ADDRESS": s.Addr, "REEVE_TLS_CA": p("ca.pem"), "REEVE_TLS_CERT": p(name + ".pem"), "REEVE_TLS_KEY": p(name + "-key.pem")}
	}
	wf := filepath.Join(t.TempDir(), "wf.yaml")
	if err := os.WriteFile(wf, []byte("name: w\nsteps:\n  - name: a\n    type: t\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := reeveEnv(t, as("admin"), "workflow", "register", "-f", wf); code != 0 {
		t.Fatalf("admin registering a workflow: exit %d: %s", code, errOut)
	}
	if code, _, errOut := reeveEnv(t, as("client"), "workflow", "register", "-f", wf); code != exitError || !strings.Contains(errOut, "PermissionDenied") {
		t.Fatalf("client registering a workflow: exit %d: %s", code, errOut)
	}
	if code, _, errOut := reeveEnv(t, as("client"), "task", "submit", "--workflow", "w"); code != 0 {
		t.Fatalf("client submitting: exit %d: %s", code, errOut)
	}
	if code, _, errOut := reeveEnv(t, as("client"), "-n", "other", "task", "list"); code != exitError || !strings.Contains(errOut, `namespace "other"`) {
		t.Fatalf("client listing another namespace: exit %d: %s", code, errOut)
	}
	// reeve agent with the agent certificate: its workflow registration is
	// refused (admin only), so an admin registers them; it serves them.
	for _, w := range demo.Workflows() {
		if _, err := s.SchedulerService().RegisterWorkflow(context.Background(), &reevev1.RegisterWorkflowRequest{Workflow: w}); err != nil {
			t.Fatal(err)
		}
	}
	actx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan int, 1)
	go func() {
		env := as("agent")
		agentDone <- run(actx, []string{"agent", "--demo", "--schedulers", s.Addr, "--id", "demo-1", "--log-level", "error"}, io.Discard, io.Discard, func(k string) string { return env[k] })
	}()
	defer func() { stopAgent(); <-agentDone }()
	code, out, errOut := reeveEnv(t, as("client"), "task", "submit", "--workflow", "demo.orders", "--input", `{"order_id":"o-1"}`, "--wait", "-o", "json")
	if code != 0 || !strings.Contains(out, "TASK_STATE_SUCCEEDED") {
		t.Fatalf("demo.orders served by reeve agent over mutual TLS: exit %d: %s %s", code, out, errOut)
	}
	if code, _, errOut := reeveEnv(t, map[string]string{"REEVE_ADDRESS": s.Addr}, "task", "list"); code != exitError || !strings.Contains(errOut, "hint: the scheduler may serve TLS") {
		t.Fatalf("plaintext call to a TLS scheduler: exit %d (%s), want 1 with a hint", code, errOut)
	}
	if code, _, errOut := reeveEnv(t, map[string]string{"REEVE_ADDRESS": s.Addr, "REEVE_TOKEN": "x"}, "task", "list"); code != exitUsage || !strings.Contains(errOut, "--token") {
		t.Fatalf("token without TLS: exit %d (%s), want a usage error", code, errOut)
	}

	// The same settings from a config file; the command line wins over it.
	cfg := filepath.Join(t.TempDir(), "reeve.yaml")
	if err := os.WriteFile(cfg, []byte("address: "+s.Addr+"\ntls-ca: "+p("ca.pem")+"\ntls-cert: "+p("client.pem")+"\ntls-key: "+p("client-key.pem")+"\nnamespace: other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := reeveEnv(t, nil, "--config", cfg, "-n", "default", "task", "list"); code != 0 {
		t.Fatalf("task list with --config: exit %d: %s", code, errOut)
	}
	if code, _, errOut := reeveEnv(t, map[string]string{"REEVE_CONFIG": cfg}, "task", "list"); code != exitError || !strings.Contains(errOut, `namespace "other"`) {
		t.Fatalf("namespace from the config file: exit %d: %s", code, errOut)
	}
	if err := os.WriteFile(cfg, []byte("tls-cerd: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := reeveEnv(t, nil, "--config", cfg, "task", "list"); code != exitUsage || !strings.Contains(errOut, "tls-cerd") {
		t.Fatalf("typo in the config file: exit %d: %s", code, errOut)
	}
}

func TestEtcdFlagsConnectWithClientCertificates(t *testing.T) {
	dir := t.TempDir()
	if _, err := tlsconfig.Init(dir, certSpecs("default"), tlsconfig.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	p := func(n string) string { return filepath.Join(dir, n) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := etcdtest.New(t, etcdtest.WithClientTLS(p("server.pem"), p("server-key.pem"), p("ca.pem")))
	if !strings.HasPrefix(e.Endpoints()[0], "https://") {
		t.Fatalf("endpoint %s, want https", e.Endpoints()[0])
	}
	cli, err := etcdClient(e.Endpoints(), &etcdSecurity{ca: p("ca.pem"), cert: p("etcd-client.pem"), key: p("etcd-client-key.pem")})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put with a client certificate: %v", err)
	}
	// Without a client certificate etcd refuses the connection.
	anon, err := etcdClient(e.Endpoints(), &etcdSecurity{ca: p("ca.pem")})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	if _, err := anon.Get(short, "k"); err == nil {
		t.Fatalf("etcd answered a client without a certificate")
	}
	if err := (&etcdSecurity{username: "u"}).apply(nil); err == nil {
		t.Fatalf("a username without a password was accepted")
	}
}

func TestDevRefusesTLSFlagsWithoutSecure(t *testing.T) {
	code, _, errOut := reeveEnv(t, nil, "dev", "--data-dir", t.TempDir(), "--tls-cert", "x.pem")
	if code != exitUsage || !strings.Contains(errOut, "--secure") {
		t.Fatalf("dev --tls-cert: exit %d (%s), want a usage error pointing to --secure", code, errOut)
	}
}
