// Package etcdtest starts a real embedded etcd member for tests, on free
// loopback ports in a temporary directory, stopped when the test ends. It is
// the one way tests start an etcd: internal/testenv builds schedulers on
// it; internal/etcdserver, which it wraps, is what `reeve dev` and the
// benchmarks embed.
//
//	m := etcdtest.New(t, etcdtest.WithMaxTxnOps(512))
//	cli := m.Client()
package etcdtest

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/reeve-org/reeve/internal/etcdserver"
)

// Member is an embedded etcd member that a test can stop and restart.
type Member struct {
	t       testing.TB
	dataDir string
	scheme  string // of the client URLs: http, https with WithClientTLS
	client  string
	peer    string
	quota   int64
	maxOps  int
	tls     *etcdserver.ClientTLS
	srv     *etcdserver.Server
}

// Option configures a Member.
type Option func(*Member)

// WithQuotaBytes sets the member's backend space quota; default etcd's
// (2 GiB).
func WithQuotaBytes(n int64) Option { return func(m *Member) { m.quota = n } }

// WithMaxTxnOps sets etcd's --max-txn-ops, the operations one transaction
// may hold; default etcd's (128).
func WithMaxTxnOps(n int) Option { return func(m *Member) { m.maxOps = n } }

// WithClientTLS serves the client port over TLS and requires client
// certificates signed by caFile; default plaintext. Endpoints are then
// https, and Client (plaintext) cannot connect: dial with the test's own
// TLS configuration.
func WithClientTLS(certFile, keyFile, caFile string) Option {
	return func(m *Member) {
		m.tls = &etcdserver.ClientTLS{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: caFile}
	}
}

// WithDataDir starts the member on dir's data (created if missing), to read
// what an earlier member left there; default a temporary directory of the
// test.
func WithDataDir(dir string) Option { return func(m *Member) { m.dataDir = dir } }

// New starts a member on free loopback ports in a temporary directory; it is
// stopped when the test ends.
func New(t testing.TB, opts ...Option) *Member {
	t.Helper()
	m := &Member{t: t}
	for _, o := range opts {
		o(m)
	}
	if m.dataDir == "" {
		m.dataDir = t.TempDir()
	}
	m.start()
	t.Cleanup(m.Stop)
	return m
}

func (m *Member) start() {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := etcdserver.Start(ctx, etcdserver.Config{
		DataDir:    m.dataDir,
		ClientAddr: m.client,
		PeerAddr:   m.peer,
		Fast:       true,
		Logger:     zap.NewNop(),
		QuotaBytes: m.quota,
		MaxTxnOps:  m.maxOps,
		ClientTLS:  m.tls,
	})
	if err != nil {
		m.t.Fatalf("start etcd: %v", err)
	}
	m.srv = srv
	m.scheme, m.client, _ = strings.Cut(srv.Endpoints()[0], "://")
	m.peer = srv.PeerAddr()
}

// Endpoints returns the client URLs; they stay the same across Restart.
func (m *Member) Endpoints() []string { return []string{m.scheme + "://" + m.client} }

// Stop stops the member; clients see it as unavailable. Safe to call twice.
func (m *Member) Stop() {
	if m.srv != nil {
		m.srv.Close()
		m.srv = nil
	}
}

// Restart starts a stopped member again on the same ports and data.
func (m *Member) Restart() {
	m.t.Helper()
	m.Stop()
	m.start()
}

// Client returns a new client of the member, closed when the test ends.
func (m *Member) Client() *clientv3.Client {
	m.t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   m.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		m.t.Fatalf("etcd client: %v", err)
	}
	m.t.Cleanup(func() { _ = c.Close() })
	return c
}

// InProcessClient returns a client that talks to the member without a
// network hop, as `reeve dev` does; valid until the member stops.
func (m *Member) InProcessClient() *clientv3.Client { return m.srv.Client() }

// Defragment defragments the member in process (etcdserver.Server.Defragment).
func (m *Member) Defragment() error { return m.srv.Defragment() }
