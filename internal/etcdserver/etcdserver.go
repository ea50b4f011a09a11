// Package etcdserver runs a single-member etcd server inside the process, for
// `reeve dev` and `reeve bench --embedded`; tests start one through
// internal/etcdtest. Production deployments use an external cluster.
package etcdserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
)

// Config configures an embedded etcd member. The zero value is not usable:
// DataDir is required.
type Config struct {
	// DataDir holds the member's data; created if missing. Required.
	DataDir string
	// ClientAddr is the host:port clients connect to; "127.0.0.1:0" picks a
	// free port (see Server.Endpoints). Default "127.0.0.1:0".
	ClientAddr string
	// PeerAddr is the host:port of the (unused) peer listener. Default "127.0.0.1:0".
	PeerAddr string
	// MaxTxnOps is etcd's --max-txn-ops, the operations one transaction
	// list may hold; 0 keeps etcd's default (128).
	MaxTxnOps int
	// QuotaBytes is the backend space quota; 0 keeps etcd's default (2 GiB).
	QuotaBytes int64
	// AutoCompactionRetention keeps this much history (periodic mode; etcd
	// then compacts every retention period). Default 1m: every task
	// transition rewrites the task record, so at a few thousand tasks/s a
	// longer history fills etcd's 2 GiB quota within minutes (measured:
	// 576 MB after 77 s at 2,300 tasks/s, see docs/benchmarks.md). Watchers
	// that fall further behind re-list, which Reeve's watches do.
	AutoCompactionRetention time.Duration
	// Fast shortens raft timers and disables fsync. For tests only: a crash
	// of the machine loses data.
	Fast bool
	// UnsafeNoFsync disables fsync only (benchmarks of the CPU path).
	UnsafeNoFsync bool
	// LogLevel of etcd's own logger. Default "error".
	LogLevel string
	// Logger replaces etcd's own logger when set (tests pass zap.NewNop()).
	Logger *zap.Logger
	// ClientTLS, when set, serves the client port over TLS and requires
	// client certificates signed by its CA. Default plaintext.
	ClientTLS *ClientTLS
}

// ClientTLS are the PEM files of a TLS client port.
type ClientTLS struct {
	CertFile, KeyFile string
	// TrustedCAFile signs the client certificates that are accepted.
	TrustedCAFile string
}

// Server is a running embedded etcd member.
type Server struct {
	etcd   *embed.Etcd
	scheme string
}

// Start starts a member and waits until it serves clients or ctx is done.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("etcdserver: DataDir is required")
	}
	ec := embed.NewConfig()
	ec.Name = "reeve-dev"
	ec.Dir = cfg.DataDir
	ec.LogLevel = orDefault(cfg.LogLevel, "error")
	if cfg.Logger != nil {
		ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(cfg.Logger)
	}
	clientURL, err := parseURL(orDefault(cfg.ClientAddr, "127.0.0.1:0"))
	if err != nil {
		return nil, fmt.Errorf("etcdserver: client address: %w", err)
	}
	if t := cfg.ClientTLS; t != nil {
		clientURL.Scheme = "https"
		ec.ClientTLSInfo = transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.TrustedCAFile, ClientCertAuth: true}
	}
	peerURL, err := parseURL(orDefault(cfg.PeerAddr, "127.0.0.1:0"))
	if err != nil {
		return nil, fmt.Errorf("etcdserver: peer address: %w", err)
	}
	ec.ListenClientUrls = []url.URL{*clientURL}
	ec.AdvertiseClientUrls = []url.URL{*clientURL}
	ec.ListenPeerUrls = []url.URL{*peerURL}
	ec.AdvertisePeerUrls = []url.URL{*peerURL}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.QuotaBackendBytes = cfg.QuotaBytes
	if cfg.MaxTxnOps > 0 {
		ec.MaxTxnOps = uint(cfg.MaxTxnOps)
	}
	retention := cfg.AutoCompactionRetention
	if retention == 0 {
		retention = time.Minute
	}
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = retention.String()
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	// etcd keeps this many raft entries in memory after each in-memory
	// snapshot (every 100 entries), for followers catching up; the default
	// 5,000 is for clusters. Reeve's group commit makes entries large (up to
	// 64 task writes, ~100 KB), so 5,000 of them held ~500 MB of a one-member
	// dev server; it has no follower (see docs/benchmarks.md).
	ec.SnapshotCatchUpEntries = 100
	if cfg.Fast {
		ec.TickMs = 10
		ec.ElectionMs = 50
		ec.UnsafeNoFsync = true
	}

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("etcdserver: start: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return &Server{etcd: e, scheme: clientURL.Scheme}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcdserver: start: %w", err)
	case <-ctx.Done():
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("etcdserver: not ready: %w", ctx.Err())
	}
}

// Endpoints returns the client URLs, with the ports actually bound.
func (s *Server) Endpoints() []string {
	eps := make([]string, 0, len(s.etcd.Clients))
	for _, l := range s.etcd.Clients {
		eps = append(eps, s.scheme+"://"+l.Addr().String())
	}
	return eps
}

// PeerAddr returns the bound peer address (host:port), to restart a member on
// the same addresses.
func (s *Server) PeerAddr() string { return s.etcd.Peers[0].Addr().String() }

// Err reports a fatal error of the running member.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the member gracefully and releases its listeners.
func (s *Server) Close() { s.etcd.Close() }

func parseURL(hostport string) (*url.URL, error) {
	return url.Parse("http://" + hostport)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Client returns a client that talks to this member in process, without a
// network hop. It is closed by Close.
func (s *Server) Client() *clientv3.Client { return v3client.New(s.etcd.Server) }

// Defragment defragments this member's backend in process. Use it instead of
// the Defragment call of Client(): etcd's in-process client has no health
// notifier in its maintenance server and panics on Defragment (etcd
// 3.7.3). The member blocks reads and writes meanwhile, as a client-side
// defragmentation does.
func (s *Server) Defragment() error { return s.etcd.Server.Backend().Defrag() }

// AppliedIndex is the raft index the member applied: it grows by one for
// every write (put, txn, delete, lease grant or revoke, compaction).
func (s *Server) AppliedIndex() uint64 { return s.etcd.Server.AppliedIndex() }

// DBSize returns the backend's size on disk and the part in use, in bytes.
func (s *Server) DBSize() (total, inUse int64) {
	b := s.etcd.Server.Backend()
	return b.Size(), b.SizeInUse()
}
