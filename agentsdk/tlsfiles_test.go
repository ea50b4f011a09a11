package agentsdk_test

import (
	"context"
	"log/slog"
	"math/big"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

// TestTLSFilesPresentRenewedCertificateOnReconnect: an agent configured
// with WithTLSFiles presents, when it reconnects, the certificate its files
// hold then, with no restart, and goes on serving steps.
func TestTLSFilesPresentRenewedCertificateOnReconnect(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	if _, err := tlsconfig.Init(dir, []tlsconfig.CertSpec{{Name: "server", Server: true}, {Name: "agent"}, {Name: "client"}}, tlsconfig.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	srvTLS, err := tlsconfig.NewReloadable(tlsconfig.Files{CA: p("ca.pem"), Cert: p("server.pem"), Key: p("server-key.pem")}, true)
	if err != nil {
		t.Fatal(err)
	}
	// The serial number of each agent stream's client certificate, as the
	// scheduler saw it.
	connects := make(chan *big.Int, 16)
	gopts := []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(srvTLS.Config())),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if info.FullMethod == reevev1.AgentService_Connect_FullMethodName {
				pr, _ := peer.FromContext(ss.Context())
				connects <- pr.AuthInfo.(credentials.TLSInfo).State.VerifiedChains[0][0].SerialNumber
			}
			return h(srv, ss)
		}),
	}
	env := testenv.New(t)
	s := env.StartSchedulerGRPC("", gopts)
	a := newAgent(t, []string{s.Addr}, agentsdk.WithTLSFiles(agentsdk.TLSFiles{CA: p("ca.pem"), Cert: p("agent.pem"), Key: p("agent-key.pem")}))
	a.Handle("t", func(context.Context, *agentsdk.Step) (any, error) { return map[string]bool{"ok": true}, nil })
	runAgent(t, a)
	next := func() *big.Int {
		t.Helper()
		select {
		case sn := <-connects:
			return sn
		case <-time.After(wait):
			t.Fatal("the agent did not connect")
			return nil
		}
	}
	first := next()

	renewed, err := tlsconfig.Issue(dir, tlsconfig.CertSpec{Name: "agent"}, tlsconfig.InitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if renewed.SerialNumber.Cmp(first) == 0 {
		t.Fatal("the renewal kept the serial number")
	}
	// The scheduler restarts at the same address: the agent reconnects.
	s.Stop()
	s = env.StartSchedulerGRPC(s.Addr, gopts)
	if got := next(); got.Cmp(renewed.SerialNumber) != 0 {
		t.Fatalf("reconnected with serial %X, want the renewed %X (first was %X)", got, renewed.SerialNumber, first)
	}

	cfg, err := tlsconfig.Client(tlsconfig.Files{CA: p("ca.pem"), Cert: p("client.pem"), Key: p("client-key.pem")}, "")
	if err != nil {
		t.Fatal(err)
	}
	c := reevev1.NewSchedulerServiceClient(testenv.DialWith(t, s.Addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg))))
	submit(t, c, "after-renewal", spec("s", "t", 10*time.Second))
	if final := testenv.WaitTask(t, c, "default", "after-renewal", wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("task after the renewal: %v %v", final.GetState(), final.GetReason())
	}
}

func TestTLSFilesUnreadableAreNewsError(t *testing.T) {
	_, err := agentsdk.New([]string{"127.0.0.1:1"}, agentsdk.WithTLSFiles(agentsdk.TLSFiles{CA: filepath.Join(t.TempDir(), "missing.pem")}))
	if err == nil {
		t.Fatal("New accepted a missing CA file")
	}
}

// A plaintext agent of a TLS scheduler logs, with each failed attempt, the
// hint that the scheduler may serve TLS and the options that set it, not
// only gRPC's "error reading server preface".
func TestPlaintextAgentOfATLSSchedulerIsToldWhy(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	if _, err := tlsconfig.Init(dir, []tlsconfig.CertSpec{{Name: "server", Server: true}}, tlsconfig.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := tlsconfig.Server(tlsconfig.Files{Cert: p("server.pem"), Key: p("server-key.pem")}, false)
	if err != nil {
		t.Fatal(err)
	}
	s := testenv.New(t).StartSchedulerGRPC("", []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))})
	logs := make(logRecords, 64)
	a := newAgent(t, []string{s.Addr}, agentsdk.WithLogger(slog.New(logs)), agentsdk.WithReconnectBackoff(time.Millisecond, 10*time.Millisecond))
	a.Handle("t", func(context.Context, *agentsdk.Step) (any, error) { return nil, nil })
	runAgent(t, a)
	deadline := time.After(wait)
	for {
		select {
		case m := <-logs:
			if m["msg"] != "cannot connect to scheduler" {
				continue
			}
			if !strings.Contains(m["hint"], "may serve TLS") || !strings.Contains(m["hint"], "agentsdk.WithTLSFiles") {
				t.Fatalf("logged %v; want a hint that the scheduler may serve TLS, naming agentsdk.WithTLSFiles", m)
			}
			return
		case <-deadline:
			t.Fatal("no 'cannot connect to scheduler' line")
		}
	}
}
