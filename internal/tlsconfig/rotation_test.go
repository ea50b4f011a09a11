package tlsconfig_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/reeve-org/reeve/internal/tlsconfig"
)

const wait = 10 * time.Second

// seen records the client certificate of each call a server received.
type seen struct {
	mu    sync.Mutex
	calls [][][]*x509.Certificate // verified chains, per call
}

func (s *seen) record(ctx context.Context) {
	p, _ := peer.FromContext(ctx)
	info, _ := p.AuthInfo.(credentials.TLSInfo)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, info.State.VerifiedChains)
}

// last returns the verified chains of the last call.
func (s *seen) last(t *testing.T) [][]*x509.Certificate {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.calls) == 0 || len(s.calls[len(s.calls)-1]) == 0 {
		t.Fatal("the server saw no call with a verified client certificate")
	}
	return s.calls[len(s.calls)-1]
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// healthServer serves gRPC health checks with r's TLS configuration on a
// loopback port and records every call's client certificate.
func healthServer(t *testing.T, r *tlsconfig.Reloadable) (addr string, hs *health.Server, calls *seen) {
	t.Helper()
	calls = &seen{}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(r.Config())),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			calls.record(ctx)
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			calls.record(ss.Context())
			return h(srv, ss)
		}))
	hs = health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String(), hs, calls
}

// dial opens a new connection with cfg; its first call makes the
// handshake.
func dial(t *testing.T, addr string, cfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func check(cc *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// watch opens a health Watch stream on cc and returns its receive
// function, after the first status.
func watch(t *testing.T, cc *grpc.ClientConn) func() (healthpb.HealthCheckResponse_ServingStatus, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("watch: %v", err)
	}
	return func() (healthpb.HealthCheckResponse_ServingStatus, error) {
		r, err := w.Recv()
		return r.GetStatus(), err
	}
}

func serialOf(t *testing.T, path string) *big.Int {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(path, strings.TrimSuffix(path, ".pem")+"-key.pem")
	if err != nil {
		t.Fatal(err)
	}
	return pair.Leaf.SerialNumber
}

func leafSerial(chains [][]*x509.Certificate) *big.Int { return chains[0][0].SerialNumber }

// certDir is a CA with a server certificate and client certificates
// "client" and "other".
func certDir(t *testing.T) (dir string, p func(string) string) {
	t.Helper()
	dir = t.TempDir()
	specs := []tlsconfig.CertSpec{{Name: "server", Server: true}, {Name: "client"}, {Name: "other"}}
	if _, err := tlsconfig.Init(dir, specs, tlsconfig.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	return dir, func(n string) string { return filepath.Join(dir, n) }
}

func clientFiles(p func(string) string, name string) tlsconfig.Files {
	return tlsconfig.Files{CA: p("ca.pem"), Cert: p(name + ".pem"), Key: p(name + "-key.pem")}
}

func TestClientPresentsRenewedCertificateOnItsNextConnection(t *testing.T) {
	dir, p := certDir(t)
	r, err := tlsconfig.NewReloadable(tlsconfig.Files{CA: p("ca.pem"), Cert: p("server.pem"), Key: p("server-key.pem")}, true)
	if err != nil {
		t.Fatal(err)
	}
	addr, hs, calls := healthServer(t, r)
	// One configuration for every connection, as a supervisor or agent has.
	cfg, err := tlsconfig.Client(clientFiles(p, "client"), "localhost")
	if err != nil {
		t.Fatal(err)
	}
	first := serialOf(t, p("client.pem"))
	before := dial(t, addr, cfg)
	if err := check(before); err != nil {
		t.Fatal(err)
	}
	if got := leafSerial(calls.last(t)); got.Cmp(first) != 0 {
		t.Fatalf("server saw serial %X, want %X", got, first)
	}
	next := watch(t, before) // a stream open across the renewal

	renewed, err := tlsconfig.Issue(dir, tlsconfig.CertSpec{Name: "client"}, tlsconfig.InitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if renewed.SerialNumber.Cmp(first) == 0 {
		t.Fatal("the renewal kept the serial number")
	}
	if err := check(dial(t, addr, cfg)); err != nil {
		t.Fatalf("new connection after the renewal: %v", err)
	}
	if got := leafSerial(calls.last(t)); got.Cmp(renewed.SerialNumber) != 0 {
		t.Fatalf("new connection presented serial %X, want the renewed %X", got, renewed.SerialNumber)
	}

	// Nothing running was dropped: the stream opened before the renewal
	// gets the next status, and its connection keeps its certificate.
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if st, err := next(); err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("stream opened before the renewal: %v, %v; want NOT_SERVING", st, err)
	}
	if err := check(before); err != nil {
		t.Fatalf("connection opened before the renewal: %v", err)
	}
	if got := leafSerial(calls.last(t)); got.Cmp(first) != 0 {
		t.Fatalf("established connection now shows serial %X, want its own %X", got, first)
	}
}

// replace renames a file with content over path, as an atomic writer does.
func replace(t *testing.T, path string, content []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestClientKeepsItsCertificateWhenNewFilesAreUnusable(t *testing.T) {
	dir, p := certDir(t)
	r, err := tlsconfig.NewReloadable(tlsconfig.Files{CA: p("ca.pem"), Cert: p("server.pem"), Key: p("server-key.pem")}, true)
	if err != nil {
		t.Fatal(err)
	}
	addr, _, calls := healthServer(t, r)
	var logs bytes.Buffer
	cfg, err := tlsconfig.ClientWithLogger(clientFiles(p, "client"), "localhost", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	first := serialOf(t, p("client.pem"))
	otherCert, err := os.ReadFile(p("other.pem"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		content []byte
	}{
		{"a certificate that does not match the key", otherCert},
		{"not PEM", []byte("half written")},
	}
	for _, tc := range cases {
		logs.Reset()
		replace(t, p("client.pem"), tc.content)
		if err := check(dial(t, addr, cfg)); err != nil {
			t.Fatalf("%s: new connection: %v", tc.name, err)
		}
		if got := leafSerial(calls.last(t)); got.Cmp(first) != 0 {
			t.Fatalf("%s: presented serial %X, want the previous %X", tc.name, got, first)
		}
		if !strings.Contains(logs.String(), "presenting the previous certificate") {
			t.Fatalf("%s: no warning logged: %q", tc.name, logs.String())
		}
	}
	renewed, err := tlsconfig.Issue(dir, tlsconfig.CertSpec{Name: "client"}, tlsconfig.InitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := check(dial(t, addr, cfg)); err != nil {
		t.Fatal(err)
	}
	if got := leafSerial(calls.last(t)); got.Cmp(renewed.SerialNumber) != 0 {
		t.Fatalf("after a valid renewal: serial %X, want %X", got, renewed.SerialNumber)
	}
}

func TestRevokedCertificateIsRefusedAfterReload(t *testing.T) {
	dir, p := certDir(t)
	ca := tlsconfig.Files{Cert: p("ca.pem"), Key: p("ca-key.pem")}
	if _, err := tlsconfig.Revoke(ca, p("crl.pem"), nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	r, err := tlsconfig.NewReloadable(tlsconfig.Files{CA: p("ca.pem"), Cert: p("server.pem"), Key: p("server-key.pem"), CRL: p("crl.pem")}, true)
	if err != nil {
		t.Fatal(err)
	}
	addr, hs, calls := healthServer(t, r)
	as := func(name string) *tls.Config {
		cfg, err := tlsconfig.Client(clientFiles(p, name), "localhost")
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	open := dial(t, addr, as("client"))
	if err := check(open); err != nil {
		t.Fatalf("client before the revocation: %v", err)
	}
	openChains := calls.last(t)
	next := watch(t, open)

	serials, err := tlsconfig.Revoke(ca, p("crl.pem"), []string{p("client.pem")}, time.Now())
	if err != nil || len(serials) != 1 || serials[0].Cmp(serialOf(t, p("client.pem"))) != 0 {
		t.Fatalf("revoke: %v, %v", serials, err)
	}
	if err := check(dial(t, addr, as("client"))); err != nil {
		t.Fatalf("revoked client before the server reloaded the CRL: %v (the CRL is read on reload only)", err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, r.Config(), dir); !errors.Is(err, tlsconfig.ErrRevoked) {
		t.Fatalf("server's handshake with the revoked client: %v, want ErrRevoked", err)
	}
	n := calls.count()
	if err := check(dial(t, addr, as("client"))); err == nil {
		t.Fatal("revoked client accepted after the reload")
	}
	if calls.count() != n {
		t.Fatal("a call of the revoked client reached the server")
	}
	if err := check(dial(t, addr, as("other"))); err != nil {
		t.Fatalf("another client after the reload: %v", err)
	}

	// TLS checks certificates at the handshake only: the revoked client's
	// established connection and stream go on; CheckRevoked tells (an
	// authorizer refuses its next calls with it, see internal/auth).
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if st, err := next(); err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("stream opened before the revocation: %v, %v", st, err)
	}
	if err := r.CheckRevoked(openChains); !errors.Is(err, tlsconfig.ErrRevoked) {
		t.Fatalf("CheckRevoked(revoked chains) = %v, want ErrRevoked", err)
	}
	if err := r.CheckRevoked(calls.last(t)); err != nil {
		t.Fatalf("CheckRevoked(other's chains) = %v", err)
	}
}

func TestCRLMustBeReadableAndSignedByTheClientCA(t *testing.T) {
	_, p := certDir(t)
	_, q := certDir(t) // another CA
	if _, err := tlsconfig.Revoke(tlsconfig.Files{Cert: p("ca.pem"), Key: p("ca-key.pem")}, p("crl.pem"), []string{p("client.pem")}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := tlsconfig.Revoke(tlsconfig.Files{Cert: q("ca.pem"), Key: q("ca-key.pem")}, q("crl.pem"), nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p("garbage.pem"), []byte("-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	server := func(crl string) tlsconfig.Files {
		return tlsconfig.Files{CA: p("ca.pem"), Cert: p("server.pem"), Key: p("server-key.pem"), CRL: crl}
	}
	for crl, want := range map[string]string{
		q("crl.pem"):     "not signed by a client CA",
		p("garbage.pem"): "CRL",
		p("missing.pem"): "no such file",
	} {
		if _, err := tlsconfig.NewReloadable(server(crl), true); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CRL %s: error %v, want one containing %q", filepath.Base(filepath.Dir(crl))+"/"+filepath.Base(crl), err, want)
		}
	}
	if _, err := tlsconfig.Server(tlsconfig.Files{Cert: p("server.pem"), Key: p("server-key.pem"), CRL: p("crl.pem")}, false); err == nil {
		t.Error("a CRL without a client CA was accepted")
	}
	if _, err := tlsconfig.Revoke(tlsconfig.Files{Cert: p("ca.pem"), Key: p("ca-key.pem")}, p("crl.pem"), []string{q("client.pem")}, time.Now()); err == nil {
		t.Error("revoked a certificate of another CA")
	}

	// A reload with a bad CRL keeps the previous one: still revoked.
	r, err := tlsconfig.NewReloadable(server(p("crl.pem")), true)
	if err != nil {
		t.Fatal(err)
	}
	addr, _, _ := healthServer(t, r)
	good, err := os.ReadFile(q("crl.pem"))
	if err != nil {
		t.Fatal(err)
	}
	replace(t, p("crl.pem"), good) // the other CA's list
	if err := r.Reload(); err == nil {
		t.Fatal("reload accepted a CRL of another CA")
	}
	as := func(name string) *tls.Config {
		cfg, err := tlsconfig.Client(clientFiles(p, name), "localhost")
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if err := check(dial(t, addr, as("client"))); err == nil {
		t.Fatal("revoked client accepted after a failed reload")
	}
	if err := check(dial(t, addr, as("other"))); err != nil {
		t.Fatalf("other client after a failed reload: %v", err)
	}
}

// resume runs a handshake between srv and cli over loopback TCP (not a
// synchronous pipe: a resuming server writes its tickets while the client
// writes its Finished) and returns whether the session was resumed and the
// server's error. The client reads until the server closes, so that it gets
// its session ticket.
func resume(t *testing.T, srv, cli *tls.Config) (resumed bool, serverErr error) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	errc := make(chan error, 1)
	go func() {
		conn, err := lis.Accept()
		if err != nil {
			errc <- err
			return
		}
		_ = conn.SetDeadline(time.Now().Add(wait))
		s := tls.Server(conn, srv)
		errc <- s.Handshake()
		_ = s.Close()
	}()
	conn, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(wait))
	c := tls.Client(conn, cli)
	if err := c.Handshake(); err == nil {
		_, _ = c.Read(make([]byte, 1)) // the ticket, then the server's close
	}
	return c.ConnectionState().DidResume, <-errc
}

func TestRevokedCertificateIsRefusedOnSessionResumption(t *testing.T) {
	_, p := certDir(t)
	ca := tlsconfig.Files{Cert: p("ca.pem"), Key: p("ca-key.pem")}
	if _, err := tlsconfig.Revoke(ca, p("crl.pem"), nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	r, err := tlsconfig.NewReloadable(tlsconfig.Files{CA: p("ca.pem"), Cert: p("server.pem"), Key: p("server-key.pem"), CRL: p("crl.pem")}, true)
	if err != nil {
		t.Fatal(err)
	}
	srv := r.Config()
	cli, err := tlsconfig.Client(clientFiles(p, "client"), "localhost")
	if err != nil {
		t.Fatal(err)
	}
	cli.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	if _, err := resume(t, srv, cli); err != nil {
		t.Fatal(err)
	}
	if resumed, err := resume(t, srv, cli); err != nil || !resumed {
		t.Fatalf("second handshake: resumed %v, %v; want a resumed session", resumed, err)
	}
	if _, err := tlsconfig.Revoke(ca, p("crl.pem"), []string{p("client.pem")}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := resume(t, srv, cli); !errors.Is(err, tlsconfig.ErrRevoked) {
		t.Fatalf("resuming with a revoked certificate: %v, want ErrRevoked", err)
	}
}
