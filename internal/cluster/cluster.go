package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// Config describes a local cluster. Binaries are required; every count has
// a default.
type Config struct {
	// Dir holds every member's data, the logs (logs/<name>.log) and the
	// agents' files. Required; created if missing.
	Dir string
	// Reeve, Etcd are paths to the reeve and etcd binaries. Required.
	Reeve, Etcd string
	// Toxiproxy is the path to toxiproxy-server. When set, components reach
	// etcd and agents reach schedulers through toxiproxy listeners on
	// 127.0.0.1 (named etcd-<i> and scheduler-<i>), so that network faults can
	// be injected on those links. Default: no proxies.
	Toxiproxy string
	// EtcdMembers, Schedulers, Supervisors, Agents are the process counts;
	// defaults 3, 2, 2, 3. EtcdMembers should be odd.
	EtcdMembers, Schedulers, Supervisors, Agents int
	// AgentArgs returns the agent-specific flags of agent i (0-based), e.g.
	// {"--demo"}. Required when Agents > 0.
	AgentArgs func(i int) []string
	// SupervisorTick and SessionTTL (seconds) are passed to the supervisors;
	// defaults 1s and 10.
	SupervisorTick time.Duration
	SessionTTL     int
	// NoFsync runs etcd with --unsafe-no-fsync: safe against process kills
	// (the page cache survives them), not against a machine crash. For tests
	// on a shared machine.
	NoFsync bool
	// EtcdMaxTxnOps, when set, runs every etcd member with --max-txn-ops
	// and tells the schedulers the same (--etcd-max-txn-ops), so that
	// workflows wider than etcd's default of 128 operations per transaction
	// allows can be registered. Default 0: etcd's default.
	EtcdMaxTxnOps int
	// StartTimeout bounds Start; default 2 minutes.
	StartTimeout time.Duration
	// Secure runs the cluster as production runs: a CA and a certificate
	// per role are created in <Dir>/certs (kept when the cluster is started
	// again in the same Dir; see Identity), etcd members require client
	// certificates on their client and peer URLs (https), schedulers serve
	// mutual TLS with role checks and reach etcd with a client certificate,
	// supervisors and agents present their role's certificate. Toxiproxy
	// forwards the TLS connections as they are. Default: everything in
	// plaintext.
	Secure bool
	// Workflows are registered through the schedulers (as Admin in a
	// secure cluster) once they serve, before the agents start. Agents
	// register the workflows they serve themselves, but in a secure
	// cluster their role may not: there, what the agents serve must be
	// listed here. Default none.
	Workflows []*reevev1.Workflow
	// ArchiveDSN, when set, is the schedulers' --archive-dsn (a PostgreSQL
	// database they share), with --archive-grace ArchiveGrace (default 2s).
	// Default: no archive.
	ArchiveDSN   string
	ArchiveGrace time.Duration
}

// Cluster is a running local cluster. Its process lists never change;
// processes in them may be stopped and started again.
type Cluster struct {
	cfg Config

	Etcd        []*Process
	Schedulers  []*Process
	Supervisors []*Process
	Agents      []*Process
	// ToxiproxyServer is nil without Config.Toxiproxy.
	ToxiproxyServer *Process
	Proxy           *Toxiproxy

	// EtcdEndpoints are the members' client URLs (direct).
	EtcdEndpoints []string
	// ComponentEtcdEndpoints are what schedulers and supervisors use:
	// EtcdEndpoints or their proxies.
	ComponentEtcdEndpoints []string
	// SchedulerAddrs are the schedulers' gRPC addresses (direct): clients
	// and supervisors use them.
	SchedulerAddrs []string
	// AgentSchedulerAddrs are what agents use: SchedulerAddrs or their proxies.
	AgentSchedulerAddrs []string
	// EtcdProxies and SchedulerProxies name the toxiproxy proxies (empty
	// without Toxiproxy).
	EtcdProxies, SchedulerProxies []string
}

func (c *Config) defaults() error {
	if c.Dir == "" || c.Reeve == "" || c.Etcd == "" {
		return errors.New("cluster: Dir, Reeve and Etcd are required")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.EtcdMembers, 3)
	def(&c.Schedulers, 2)
	def(&c.Supervisors, 2)
	def(&c.Agents, 3)
	def(&c.SessionTTL, 10)
	if c.SupervisorTick == 0 {
		c.SupervisorTick = time.Second
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 2 * time.Minute
	}
	if c.Agents > 0 && c.AgentArgs == nil {
		return errors.New("cluster: AgentArgs is required when Agents > 0")
	}
	return nil
}

// Start starts etcd, waits for it to serve, then toxiproxy (if configured),
// the schedulers (waiting until they report SERVING), the supervisors and
// the agents. On error it stops what it started.
func Start(ctx context.Context, cfg Config) (c *Cluster, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	c = &Cluster{cfg: cfg}
	defer func() {
		if err != nil {
			_ = c.Stop(5 * time.Second)
		}
	}()
	if cfg.Secure {
		if err := c.issueCerts(); err != nil {
			return c, err
		}
	}
	if err := c.startEtcd(ctx); err != nil {
		return c, err
	}
	c.ComponentEtcdEndpoints = c.EtcdEndpoints
	for range cfg.Schedulers {
		addr, err := freeAddr()
		if err != nil {
			return c, err
		}
		c.SchedulerAddrs = append(c.SchedulerAddrs, addr)
	}
	c.AgentSchedulerAddrs = c.SchedulerAddrs
	if cfg.Toxiproxy != "" {
		if err := c.startProxies(ctx); err != nil {
			return c, err
		}
	}
	for i, addr := range c.SchedulerAddrs {
		args := []string{"scheduler", "--etcd-endpoints", strings.Join(c.ComponentEtcdEndpoints, ","), "--listen", addr, "--id", fmt.Sprintf("scheduler-%d", i+1)}
		args = append(args, c.schedulerTLSArgs()...)
		if cfg.EtcdMaxTxnOps > 0 {
			args = append(args, "--etcd-max-txn-ops", strconv.Itoa(cfg.EtcdMaxTxnOps))
		}
		// The first scheduler writes task records compressed, the others
		// plain: every task is read and advanced by schedulers of both
		// settings, as during the rollout of --record-compression
		// (docs/operations.md), and the chaos suite checks it under faults.
		// Both explicit, whatever the default.
		if i == 0 {
			args = append(args, "--record-compression=true")
		} else {
			args = append(args, "--record-compression=false")
		}
		if cfg.ArchiveDSN != "" {
			grace := cfg.ArchiveGrace
			if grace == 0 {
				grace = 2 * time.Second
			}
			args = append(args, "--archive-dsn", cfg.ArchiveDSN, "--archive-grace", grace.String())
		}
		p := c.process(fmt.Sprintf("scheduler-%d", i+1), cfg.Reeve, addr, args...)
		c.Schedulers = append(c.Schedulers, p)
		if err := p.Start(); err != nil {
			return c, err
		}
	}
	for _, addr := range c.SchedulerAddrs {
		if err := c.WaitServing(ctx, addr); err != nil {
			return c, err
		}
	}
	if err := c.registerWorkflows(ctx); err != nil {
		return c, err
	}
	for i := range cfg.Supervisors {
		args := []string{"supervisor", "--etcd-endpoints", strings.Join(c.ComponentEtcdEndpoints, ","), "--schedulers", strings.Join(c.SchedulerAddrs, ","),
			"--id", fmt.Sprintf("supervisor-%d", i+1), "--tick", cfg.SupervisorTick.String(), "--session-ttl", strconv.Itoa(cfg.SessionTTL)}
		args = append(append(args, c.etcdTLSArgs()...), c.clientTLSArgs(Supervisor)...)
		p := c.process(fmt.Sprintf("supervisor-%d", i+1), cfg.Reeve, "", args...)
		c.Supervisors = append(c.Supervisors, p)
		if err := p.Start(); err != nil {
			return c, err
		}
	}
	for i := range cfg.Agents {
		id := fmt.Sprintf("agent-%d", i+1)
		args := append(append([]string{"agent", "--schedulers", strings.Join(c.AgentSchedulerAddrs, ","), "--id", id}, c.clientTLSArgs(Agent)...), cfg.AgentArgs(i)...)
		p := c.process(id, cfg.Reeve, "", args...)
		c.Agents = append(c.Agents, p)
		if err := p.Start(); err != nil {
			return c, err
		}
	}
	return c, nil
}

func (c *Cluster) process(name, path, addr string, args ...string) *Process {
	return &Process{Name: name, Addr: addr, path: path, args: args, logPath: filepath.Join(c.cfg.Dir, "logs", name+".log")}
}

// registerWorkflows registers Config.Workflows through the first scheduler,
// as Admin, retrying while it is unavailable.
func (c *Cluster) registerWorkflows(ctx context.Context) error {
	if len(c.cfg.Workflows) == 0 {
		return nil
	}
	opts, err := c.DialOptions(Admin)
	if err != nil {
		return err
	}
	cc, err := grpc.NewClient(c.SchedulerAddrs[0], opts...)
	if err != nil {
		return err
	}
	defer cc.Close()
	sc := reevev1.NewSchedulerServiceClient(cc)
	for _, w := range c.cfg.Workflows {
		var refused error // for good: not retried
		err := waitFor(ctx, "register workflow "+w.GetName(), func(ctx context.Context) error {
			_, err := sc.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: w})
			switch status.Code(err) {
			case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
				return err
			}
			refused = err
			return nil
		})
		if err == nil && refused != nil {
			err = fmt.Errorf("cluster: register workflow %s: %w", w.GetName(), refused)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// SessionTTL returns the supervisors' session TTL in seconds.
func (c *Cluster) SessionTTL() int { return c.cfg.SessionTTL }

// Dir returns the cluster's directory.
func (c *Cluster) Dir() string { return c.cfg.Dir }

func (c *Cluster) startEtcd(ctx context.Context) error {
	type urls struct{ client, peer string }
	var members []urls
	var initial []string
	for i := range c.cfg.EtcdMembers {
		ca, err := freeAddr()
		if err != nil {
			return err
		}
		pa, err := freeAddr()
		if err != nil {
			return err
		}
		members = append(members, urls{c.scheme() + ca, c.scheme() + pa})
		initial = append(initial, fmt.Sprintf("etcd-%d=%s%s", i+1, c.scheme(), pa))
	}
	for i, m := range members {
		name := fmt.Sprintf("etcd-%d", i+1)
		args := []string{
			"--name", name, "--data-dir", filepath.Join(c.cfg.Dir, name),
			"--listen-client-urls", m.client, "--advertise-client-urls", m.client,
			"--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "reeve-local",
			"--auto-compaction-mode", "periodic", "--auto-compaction-retention", "5m",
			"--quota-backend-bytes", strconv.Itoa(2 << 30),
			"--log-level", "warn",
		}
		args = append(args, c.etcdMemberTLSArgs()...)
		if c.cfg.NoFsync {
			args = append(args, "--unsafe-no-fsync")
		}
		if c.cfg.EtcdMaxTxnOps > 0 {
			args = append(args, "--max-txn-ops", strconv.Itoa(c.cfg.EtcdMaxTxnOps))
		}
		p := c.process(name, c.cfg.Etcd, strings.TrimPrefix(m.client, c.scheme()), args...)
		c.Etcd = append(c.Etcd, p)
		c.EtcdEndpoints = append(c.EtcdEndpoints, m.client)
		if err := p.Start(); err != nil {
			return err
		}
	}
	tlsCfg, err := c.ClientTLS(EtcdClient)
	if err != nil {
		return err
	}
	return WaitEtcd(ctx, c.EtcdEndpoints, tlsCfg)
}

func (c *Cluster) startProxies(ctx context.Context) error {
	api, err := freeAddr()
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(api)
	c.ToxiproxyServer = c.process("toxiproxy", c.cfg.Toxiproxy, api, "-host", host, "-port", port)
	if err := c.ToxiproxyServer.Start(); err != nil {
		return err
	}
	c.Proxy = NewToxiproxy("http://" + api)
	if err := waitFor(ctx, "toxiproxy "+api, func(ctx context.Context) error { return c.Proxy.Ping(ctx) }); err != nil {
		return err
	}
	proxy := func(name, upstream string) (string, error) {
		listen, err := freeAddr()
		if err != nil {
			return "", err
		}
		return listen, c.Proxy.CreateProxy(ctx, name, listen, upstream)
	}
	var etcdVia []string
	for i, ep := range c.EtcdEndpoints {
		name := fmt.Sprintf("etcd-%d", i+1)
		listen, err := proxy(name, strings.TrimPrefix(ep, c.scheme()))
		if err != nil {
			return err
		}
		c.EtcdProxies = append(c.EtcdProxies, name)
		etcdVia = append(etcdVia, c.scheme()+listen)
	}
	c.ComponentEtcdEndpoints = etcdVia
	var schedVia []string
	for i, addr := range c.SchedulerAddrs {
		name := fmt.Sprintf("scheduler-%d", i+1)
		listen, err := proxy(name, addr)
		if err != nil {
			return err
		}
		c.SchedulerProxies = append(c.SchedulerProxies, name)
		schedVia = append(schedVia, listen)
	}
	c.AgentSchedulerAddrs = schedVia
	return nil
}

// Stop stops the cluster in order, each process with SIGTERM and, after
// grace, SIGKILL: agents (they finish running steps), supervisors,
// schedulers (they drain their agents), toxiproxy, etcd members.
func (c *Cluster) Stop(grace time.Duration) error {
	var errs []error
	stopAll := func(ps []*Process) {
		done := make(chan error, len(ps))
		for _, p := range ps {
			go func() { done <- p.Stop(grace) }()
		}
		for range ps {
			errs = append(errs, <-done)
		}
	}
	stopAll(c.Agents)
	stopAll(c.Supervisors)
	stopAll(c.Schedulers)
	if c.ToxiproxyServer != nil {
		stopAll([]*Process{c.ToxiproxyServer})
	}
	stopAll(c.Etcd)
	return errors.Join(errs...)
}

// Client returns an etcd client of the members (direct), for checks; in a
// secure cluster it presents the EtcdClient certificate.
func (c *Cluster) Client() (*clientv3.Client, error) {
	tlsCfg, err := c.ClientTLS(EtcdClient)
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{Endpoints: c.EtcdEndpoints, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// WaitEtcd waits until the etcd cluster at endpoints serves a linearizable
// read; tlsCfg is the client's TLS configuration, nil for plaintext.
func WaitEtcd(ctx context.Context, endpoints []string, tlsCfg *tls.Config) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	return waitFor(ctx, "etcd "+strings.Join(endpoints, ","), func(ctx context.Context) error {
		_, err := cli.Get(ctx, "reeve-cluster-health")
		return err
	})
}

// WaitServing waits until the scheduler at addr (one of the cluster's, or a
// proxy of one) reports SERVING; in a secure cluster it connects over TLS as
// Client.
func (c *Cluster) WaitServing(ctx context.Context, addr string) error {
	opts, err := c.DialOptions(Client)
	if err != nil {
		return err
	}
	return WaitServing(ctx, addr, opts...)
}

// WaitServing waits until the gRPC server at addr reports SERVING. opts are
// the connection's options; default plaintext.
func WaitServing(ctx context.Context, addr string, opts ...grpc.DialOption) error {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return err
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	return waitFor(ctx, "scheduler "+addr, func(ctx context.Context) error {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("status %v", resp.GetStatus())
		}
		return nil
	})
}

// waitFor calls check every 100ms until it succeeds or ctx ends.
func waitFor(ctx context.Context, what string, check func(context.Context) error) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := check(cctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: waiting for %s: %w (last error: %v)", what, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freeAddr returns a free loopback address for a process of the cluster.
// Processes are restarted on the address they had, so the port is picked
// below the kernel's ephemeral port range when it can be: a port from that
// range (what binding port 0 gives) can be taken, while its process is
// down, as the source port of any outgoing connection on the machine, and
// a restarted scheduler then failed with "address already in use". The
// port is free when picked; another process could still take it before
// ours binds it (Start then fails clearly).
func freeAddr() (string, error) {
	if low, ok := ephemeralPortsFrom(); ok && low > minPickedPort+1000 {
		for range 100 {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", minPickedPort+rand.IntN(low-minPickedPort)))
			if err == nil {
				defer l.Close()
				return l.Addr().String(), nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// minPickedPort is the lowest port freeAddr picks (above the well-known and
// most registered services' ports).
const minPickedPort = 20000

// ephemeralPortsFrom returns the first port of the kernel's ephemeral range
// (Linux; false elsewhere or when it cannot be read).
func ephemeralPortsFrom() (int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, false
	}
	low, err := strconv.Atoi(f[0])
	return low, err == nil
}
