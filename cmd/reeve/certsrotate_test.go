package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

// TestSchedulerRefusesRevokedCertificateAfterReload: `reeve certs revoke`
// writes a CRL, a scheduler with --tls-crl re-reads it on reload (SIGHUP),
// and then refuses the revoked certificate's new connections and its open
// connection's new calls, while other certificates and the streams already
// open go on.
func TestSchedulerRefusesRevokedCertificateAfterReload(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	if code, _, errOut := reeveEnv(t, nil, "certs", "init", "--dir", dir); code != 0 {
		t.Fatalf("certs init: %s", errOut)
	}
	if code, out, errOut := reeveEnv(t, nil, "certs", "revoke", "--dir", dir); code != 0 || !strings.Contains(out, "0 revoked") {
		t.Fatalf("certs revoke without --cert (an empty list): exit %d: %s %s", code, out, errOut)
	}
	sec := clientSecurity{cert: p("server.pem"), key: p("server-key.pem")}
	srv := serverSecurity{clientCA: p("ca.pem"), crl: p("crl.pem")}
	gopts, reload, err := srv.serverOptions(&sec, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	s := testenv.New(t).StartSchedulerGRPC("", gopts)
	as := func(name string) map[string]string {
		return map[string]string{"REEVE_ADDRESS": s.Addr, "REEVE_TLS_CA": p("ca.pem"), "REEVE_TLS_CERT": p(name + ".pem"), "REEVE_TLS_KEY": p(name + "-key.pem")}
	}
	conn := func(name string) *grpc.ClientConn {
		cfg, err := tlsconfig.Client(tlsconfig.Files{CA: p("ca.pem"), Cert: p(name + ".pem"), Key: p(name + "-key.pem")}, "")
		if err != nil {
			t.Fatal(err)
		}
		return testenv.DialWith(t, s.Addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The client's connection and a watch of its namespace, open before the
	// revocation.
	client := reevev1.NewSchedulerServiceClient(conn("client"))
	list, err := client.ListTasks(ctx, &reevev1.ListTasksRequest{Namespace: "default"})
	if err != nil {
		t.Fatalf("client before the revocation: %v", err)
	}
	watch, err := client.WatchTasks(ctx, &reevev1.WatchTasksRequest{Namespace: "default", StartRevision: list.GetRevision()})
	if err != nil {
		t.Fatal(err)
	}
	admin := reevev1.NewSchedulerServiceClient(conn("admin"))
	sub, err := admin.SubmitTask(ctx, inlineTask())
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := watch.Recv(); err != nil || ev.GetChanged().GetTask().GetId() != sub.GetTask().GetId() {
		t.Fatalf("watch before the revocation: %v, %v; want the new task", ev, err)
	}

	code, out, errOut := reeveEnv(t, nil, "certs", "revoke", "--dir", dir, "--cert", p("client.pem"))
	if code != 0 || !strings.Contains(out, "1 revoked") {
		t.Fatalf("certs revoke --cert client.pem: exit %d: %s %s", code, out, errOut)
	}
	if err := reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if code, _, errOut := reeveEnv(t, as("client"), "task", "list"); code != exitError || !strings.Contains(errOut, "Unavailable") {
		// Refused in the handshake: the client sees the server's alert or,
		// as often, the connection closed under it.
		t.Fatalf("revoked client listing tasks on a new connection: exit %d (%s), want Unavailable", code, errOut)
	}
	if code, _, errOut := reeveEnv(t, as("admin"), "task", "list"); code != 0 {
		t.Fatalf("admin after the reload: exit %d: %s", code, errOut)
	}
	// The revoked certificate's established connection: new calls are
	// refused; the watch it opened before goes on until it ends.
	if _, err := client.ListTasks(ctx, &reevev1.ListTasksRequest{Namespace: "default"}); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked client's open connection: %v, want Unauthenticated naming the revocation", err)
	}
	sub, err = admin.SubmitTask(ctx, inlineTask())
	if err != nil {
		t.Fatal(err)
	}
	// Skip the first task's own changes (its step becomes ready).
	ev, err := watch.Recv()
	for err == nil && ev.GetChanged().GetTask().GetId() != sub.GetTask().GetId() {
		ev, err = watch.Recv()
	}
	if err != nil || ev.GetChanged().GetTask().GetId() != sub.GetTask().GetId() {
		t.Fatalf("watch opened before the revocation: %v, %v; want the new task", ev, err)
	}

	// A broken CRL: refused at start, kept-previous on reload.
	if err := os.WriteFile(p("bad-crl.pem"), []byte("not a CRL"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := serverSecurity{clientCA: p("ca.pem"), crl: p("bad-crl.pem")}
	if _, _, err := bad.serverOptions(&sec, testenv.Logger()); err == nil {
		t.Fatal("a scheduler started with an unparsable CRL")
	}
	if _, _, err := (&serverSecurity{crl: p("crl.pem")}).serverOptions(&sec, testenv.Logger()); err == nil || !strings.Contains(err.Error(), "--tls-client-ca") {
		t.Fatalf("--tls-crl without --tls-client-ca: %v, want a usage error naming --tls-client-ca", err)
	}
	if err := os.Rename(p("bad-crl.pem"), p("crl.pem")); err != nil {
		t.Fatal(err)
	}
	if err := reload(); err == nil {
		t.Fatal("reload accepted an unparsable CRL")
	}
	if code, _, _ := reeveEnv(t, as("client"), "task", "list"); code == 0 {
		t.Fatal("revoked client accepted after a failed reload")
	}
	if code, _, errOut := reeveEnv(t, as("admin"), "task", "list"); code != 0 {
		t.Fatalf("admin after a failed reload: exit %d: %s", code, errOut)
	}
}

func inlineTask() *reevev1.SubmitTaskRequest {
	return &reevev1.SubmitTaskRequest{Namespace: "default", Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{
		Name: "w", Steps: []*reevev1.StepSpec{{Name: "s", Type: "t", Timeout: durationpb.New(10 * time.Second)}},
	}}}
}

func TestTransportHintNamesARefusedCertificate(t *testing.T) {
	cases := map[string]string{
		`connection error: desc = "error reading server preface: remote error: tls: bad certificate"`:      "refused this client certificate",
		`connection error: desc = "error reading server preface: remote error: tls: certificate required"`: "refused this client certificate",
		`connection error: desc = "error reading server preface: EOF"`:                                     "may serve TLS",
		`connection error: desc = "tls: first record does not look like a TLS handshake"`:                  "serves plaintext",
	}
	for msg, want := range cases {
		if got := transportHint(status.New(codes.Unavailable, msg)); !strings.Contains(got, want) {
			t.Errorf("hint for %q: %q, want one saying %q", msg, got, want)
		}
	}
}

func TestCertsRenewKeepsGrantsAndHosts(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	if code, _, errOut := reeveEnv(t, nil, "certs", "init", "--dir", dir, "--namespace", "pay", "--hosts", "sched.example,10.0.0.1"); code != 0 {
		t.Fatalf("certs init: %s", errOut)
	}
	read := func(name string) *x509.Certificate {
		pair, err := tls.LoadX509KeyPair(p(name+".pem"), p(name+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		return pair.Leaf
	}
	oldAgent, oldServer := read("agent"), read("server")
	if code, out, errOut := reeveEnv(t, nil, "certs", "renew", "--dir", dir, "agent", "server"); code != 0 || !strings.Contains(out, "serial") {
		t.Fatalf("certs renew: exit %d: %s %s", code, out, errOut)
	}
	agent, server := read("agent"), read("server")
	if agent.SerialNumber.Cmp(oldAgent.SerialNumber) == 0 || agent.URIs[0].String() != "reeve://agent/pay" || agent.Subject.CommonName != "agent" {
		t.Fatalf("renewed agent: serial %X (was %X), URIs %v, CN %q", agent.SerialNumber, oldAgent.SerialNumber, agent.URIs, agent.Subject.CommonName)
	}
	if err := server.VerifyHostname("sched.example"); err != nil || server.VerifyHostname("10.0.0.1") != nil || server.SerialNumber.Cmp(oldServer.SerialNumber) == 0 {
		t.Fatalf("renewed server: %v, hosts %v %v", err, server.DNSNames, server.IPAddresses)
	}
	if fi, err := os.Stat(p("agent-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("renewed key: %v, %v; want mode 0600", fi, err)
	}
	if code, _, _ := reeveEnv(t, nil, "certs", "renew", "--dir", dir, "nobody"); code != exitUsage {
		t.Fatalf("renewing a certificate that does not exist: exit %d, want %d", code, exitUsage)
	}
}
