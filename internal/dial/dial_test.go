package dial_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/dial"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

// wait bounds every wait of these tests.
const wait = 20 * time.Second

func TestAddressesNameTheField(t *testing.T) {
	for _, list := range []string{"", ",", " , ", "no-port", "a:1,no-port", "a:1:2", "[::1:7430", "a:"} {
		_, err := dial.Addresses(list)
		var de *dial.Error
		if !errors.As(err, &de) || de.Field != dial.FieldAddress {
			t.Errorf("Addresses(%q): %v; want a *dial.Error naming %s", list, err, dial.FieldAddress)
		}
		if _, err := dial.Schedulers(dial.Config{Address: list}); !errors.As(err, &de) || de.Field != dial.FieldAddress {
			t.Errorf("Schedulers(Address %q): %v; want a *dial.Error naming %s", list, err, dial.FieldAddress)
		}
	}
	got, err := dial.Addresses(" a:1 , [::1]:2,,b.example:3 ")
	if want := []string{"a:1", "[::1]:2", "b.example:3"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("Addresses: %q, %v; want %q", got, err, want)
	}
}

func TestCredentialsNeedTLS(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg   dial.Config
		field string
	}{
		{dial.Config{Address: "a:1", Cert: "c.pem", Key: "k.pem"}, dial.FieldCert},
		{dial.Config{Address: "a:1", Key: "k.pem"}, dial.FieldKey},
		{dial.Config{Address: "a:1", Token: "t"}, dial.FieldToken},
		{dial.Config{Address: "a:1", CA: bad}, dial.FieldTLSFiles},
		{dial.Config{Address: "a:1", TLS: true, Cert: "c.pem"}, dial.FieldTLSFiles},
	} {
		_, err := dial.Schedulers(c.cfg)
		var de *dial.Error
		if !errors.As(err, &de) || de.Field != c.field {
			t.Errorf("%+v: %v; want a *dial.Error naming %s", c.cfg, err, c.field)
		}
	}
	if cfg, err := (dial.Config{Address: "a:1"}).TLSConfig(); cfg != nil || err != nil {
		t.Errorf("plaintext: TLS config %v, %v; want none", cfg, err)
	}
	if cfg, err := (dial.Config{Address: "a:1", ServerName: "s"}).TLSConfig(); err != nil || cfg == nil || cfg.ServerName != "s" {
		t.Errorf("ServerName: TLS config %v, %v; want TLS verifying s", cfg, err)
	}
}

// counted starts a scheduler of env with gopts that counts the unary calls
// it serves.
func counted(env *testenv.Env, gopts ...grpc.ServerOption) (*testenv.Scheduler, *atomic.Int64) {
	var n atomic.Int64
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		n.Add(1)
		return h(ctx, req)
	}
	return env.StartSchedulerGRPC("", append(gopts, grpc.ChainUnaryInterceptor(count))), &n
}

// callUntilBoth calls through cc until both counters moved, then 20 more
// times, and returns how many of those 20 each scheduler served.
func callUntilBoth(t *testing.T, cc *grpc.ClientConn, a, b *atomic.Int64) (int64, int64) {
	t.Helper()
	c := reevev1.NewSchedulerServiceClient(cc)
	call := func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if _, err := c.ListWorkflows(ctx, &reevev1.ListWorkflowsRequest{}); err != nil {
			t.Fatalf("ListWorkflows: %v", err)
		}
	}
	deadline := time.Now().Add(wait)
	for a.Load() == 0 || b.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after %s one scheduler never got a call: %d and %d", wait, a.Load(), b.Load())
		}
		call()
	}
	a0, b0 := a.Load(), b.Load()
	for range 20 {
		call()
	}
	return a.Load() - a0, b.Load() - b0
}

// Several addresses: once both schedulers are up, calls alternate.
func TestSchedulersSpreadCallsRoundRobin(t *testing.T) {
	env := testenv.New(t)
	s1, n1 := counted(env)
	s2, n2 := counted(env)
	cc, err := dial.Schedulers(dial.Config{Address: s1.Addr + " , " + s2.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if a, b := callUntilBoth(t, cc, n1, n2); a != 10 || b != 10 {
		t.Fatalf("20 calls over two ready schedulers went %d and %d; want 10 and 10", a, b)
	}
}

// With TLS each address is verified against its own host: a scheduler whose
// certificate names only localhost, and one whose certificate names only
// 127.0.0.1, are both reached through "localhost:p1,127.0.0.1:p2"; the first
// is refused as 127.0.0.1, unless ServerName says localhost.
func TestSchedulersVerifyEachAddressAgainstItsHost(t *testing.T) {
	serve := func(env *testenv.Env, host string) (addr, ca string, n *atomic.Int64) {
		dir := t.TempDir()
		if _, err := tlsconfig.Init(dir, []tlsconfig.CertSpec{{Name: "server", Server: true}}, tlsconfig.InitOptions{Hosts: []string{host}}); err != nil {
			t.Fatal(err)
		}
		p := func(n string) string { return filepath.Join(dir, n) }
		cfg, err := tlsconfig.Server(tlsconfig.Files{Cert: p("server.pem"), Key: p("server-key.pem")}, false)
		if err != nil {
			t.Fatal(err)
		}
		s, n := counted(env, grpc.Creds(credentials.NewTLS(cfg)))
		return s.Addr, p("ca.pem"), n
	}
	env := testenv.New(t)
	addrLocal, caLocal, nLocal := serve(env, "localhost")
	addrIP, caIP, nIP := serve(env, "127.0.0.1")
	bundle := filepath.Join(t.TempDir(), "cas.pem")
	var pems []byte
	for _, f := range []string{caLocal, caIP} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pems = append(pems, b...)
	}
	if err := os.WriteFile(bundle, pems, 0o600); err != nil {
		t.Fatal(err)
	}
	portLocal := addrLocal[strings.LastIndex(addrLocal, ":"):]

	cc, err := dial.Schedulers(dial.Config{Address: "localhost" + portLocal + "," + addrIP, CA: bundle})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if a, b := callUntilBoth(t, cc, nLocal, nIP); a != 10 || b != 10 {
		t.Fatalf("20 calls went %d and %d; want 10 and 10", a, b)
	}

	// 127.0.0.1 is not a name of the first scheduler's certificate.
	wrong, err := dial.Schedulers(dial.Config{Address: addrLocal, CA: bundle})
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err = reevev1.NewSchedulerServiceClient(wrong).ListWorkflows(ctx, &reevev1.ListWorkflowsRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("a certificate for localhost dialed as 127.0.0.1: %v; want UNAVAILABLE naming the certificate error", err)
	}
	before := nLocal.Load()
	over, err := dial.Schedulers(dial.Config{Address: addrLocal, CA: bundle, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	if _, err := reevev1.NewSchedulerServiceClient(over).ListWorkflows(ctx, &reevev1.ListWorkflowsRequest{}); err != nil || nLocal.Load() != before+1 {
		t.Fatalf("ServerName localhost: %v (calls %d, want %d)", err, nLocal.Load(), before+1)
	}
}
