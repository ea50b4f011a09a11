package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/reeve-org/reeve/internal/auth"
	"github.com/reeve-org/reeve/internal/dial"
	"github.com/reeve-org/reeve/internal/tlsconfig"
	"github.com/reeve-org/reeve/scheduler"
)

// clientSecurity are the flags of every command that calls a scheduler: the
// CA that signs the scheduler's certificate, this side's certificate (for
// mutual TLS) and a bearer token. Plaintext when none is set.
type clientSecurity struct {
	tls        bool
	ca         string
	cert, key  string
	serverName string
	token      string
}

func (c *clientSecurity) register(cmd *cobra.Command, getenv func(string) string) {
	f := cmd.PersistentFlags()
	f.BoolVar(&c.tls, "tls", envOr(getenv, "REEVE_TLS", "") == "1", "use TLS with the system's roots (implied by --tls-ca; env REEVE_TLS=1)")
	f.StringVar(&c.ca, "tls-ca", getenv("REEVE_TLS_CA"), "CA certificate(s) the scheduler's certificate must chain to (env REEVE_TLS_CA)")
	f.StringVar(&c.cert, "tls-cert", getenv("REEVE_TLS_CERT"), "this process's certificate: the client certificate, or for the scheduler and dev commands the server certificate (env REEVE_TLS_CERT)")
	f.StringVar(&c.key, "tls-key", getenv("REEVE_TLS_KEY"), "private key of --tls-cert (env REEVE_TLS_KEY)")
	f.StringVar(&c.serverName, "tls-server-name", getenv("REEVE_TLS_SERVER_NAME"), "name to verify the scheduler's certificate against (default: the host of the address; env REEVE_TLS_SERVER_NAME)")
	f.StringVar(&c.token, "token", getenv("REEVE_TOKEN"), "bearer token sent with every call; needs TLS (prefer env REEVE_TOKEN: flags show in ps)")
}

// dialConfig is how to reach the schedulers at address (one host:port or
// several comma-separated) with these flags.
func (c *clientSecurity) dialConfig(address string) dial.Config {
	return dial.Config{Address: address, TLS: c.tls, CA: c.ca, Cert: c.cert, Key: c.key, ServerName: c.serverName, Token: c.token}
}

// tlsConfig returns the client TLS configuration, nil for plaintext.
func (c *clientSecurity) tlsConfig() (*tls.Config, error) {
	cfg, err := c.dialConfig("").TLSConfig()
	if err != nil {
		return nil, dialUsage(err, "--address")
	}
	return cfg, nil
}

// dialUsage turns a *dial.Error into a usage error naming the flag of the
// field: addressFlag for the address list, the --tls-* flags and --token
// for the others. Other errors are prefixed with addressFlag.
func dialUsage(err error, addressFlag string) error {
	var de *dial.Error
	if !errors.As(err, &de) {
		return fmt.Errorf("%s: %w", addressFlag, err)
	}
	switch de.Field {
	case dial.FieldAddress:
		return usagef("%s: %s", addressFlag, de.Reason)
	case dial.FieldCert, dial.FieldKey, dial.FieldToken:
		flag := map[string]string{dial.FieldCert: "--tls-cert", dial.FieldKey: "--tls-key", dial.FieldToken: "--token"}[de.Field]
		return usagef("%s: %s: set --tls-ca (or --tls)", flag, de.Reason)
	}
	return usagef("--tls-ca/--tls-cert/--tls-key: %s", de.Reason)
}

// serverSecurity are the flags of a command that serves the gRPC API, on top
// of clientSecurity's --tls-cert/--tls-key (the server certificate).
type serverSecurity struct {
	clientCA   string
	crl        string
	tokensFile string
	// devTokens are tokens of `reeve dev --secure` kept in memory (the
	// console's admin token), accepted beside those of tokensFile.
	devTokens auth.Tokens
}

// tokens returns the tokens of tokensFile and devTokens.
func (s *serverSecurity) tokens() (auth.Tokens, error) {
	out := auth.Tokens{}
	if s.tokensFile != "" {
		t, err := auth.LoadTokens(s.tokensFile)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, t)
	}
	maps.Copy(out, s.devTokens)
	return out, nil
}

func (s *serverSecurity) register(cmd *cobra.Command, getenv func(string) string) {
	f := cmd.Flags()
	f.StringVar(&s.clientCA, "tls-client-ca", getenv("REEVE_TLS_CLIENT_CA"), "CA of client certificates: turns on mutual TLS and role checks; certificates carry their grants as reeve:// URI SANs (env REEVE_TLS_CLIENT_CA)")
	f.StringVar(&s.crl, "tls-crl", getenv("REEVE_TLS_CRL"), "certificate revocation list(s) (PEM) signed by --tls-client-ca: client certificates it revokes are refused; re-read on SIGHUP (env REEVE_TLS_CRL)")
	f.StringVar(&s.tokensFile, "tokens-file", getenv("REEVE_TOKENS_FILE"), "YAML/JSON file of bearer tokens and their grants: turns on role checks (env REEVE_TOKENS_FILE)")
}

// serverOptions returns the gRPC server options for TLS and authorization:
// none for plaintext (the dev default). reload re-reads the certificate, key,
// client CA, CRL and tokens file (on SIGHUP, see reloadOnHangup); nil for
// plaintext.
func (s *serverSecurity) serverOptions(c *clientSecurity, log *slog.Logger) (opts []grpc.ServerOption, reload func() error, err error) {
	if c.cert == "" && c.key == "" {
		if s.clientCA != "" || s.crl != "" || s.tokensFile != "" {
			return nil, nil, usagef("--tls-client-ca, --tls-crl and --tokens-file need TLS: set --tls-cert and --tls-key")
		}
		log.Warn("serving plaintext gRPC without authentication: anyone who can reach the port can do anything (see docs/security.md)")
		return nil, nil, nil
	}
	if s.crl != "" && s.clientCA == "" {
		return nil, nil, usagef("--tls-crl: revokes client certificates: set --tls-client-ca too")
	}
	tokens, err := s.tokens()
	if err != nil {
		return nil, nil, usagef("--tokens-file: %v", err)
	}
	// Client certificates are required unless tokens are an alternative.
	withTokens := s.tokensFile != "" || len(s.devTokens) > 0
	tlsCfg, err := tlsconfig.NewReloadable(tlsconfig.Files{CA: s.clientCA, Cert: c.cert, Key: c.key, CRL: s.crl}, s.clientCA != "" && !withTokens)
	if err != nil {
		return nil, nil, usageError{err}
	}
	opts = []grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg.Config()))}
	if s.clientCA == "" && !withTokens {
		log.Warn("serving TLS without authentication: set --tls-client-ca or --tokens-file (see docs/security.md)")
		return opts, tlsCfg.Reload, nil
	}
	// A certificate revoked by a reloaded CRL is refused its connection's
	// next calls too, not only new handshakes.
	a := auth.New(auth.Config{Certificates: s.clientCA != "", Tokens: tokens, Revoked: tlsCfg.CheckRevoked, Log: log.With("component", "auth")})
	reload = func() error {
		if s.tokensFile != "" {
			t, err := s.tokens()
			if err != nil {
				return err
			}
			a.SetTokens(t)
		}
		return tlsCfg.Reload()
	}
	return append(opts, a.ServerOptions()...), reload, nil
}

// reloadOnHangup calls reload on every SIGHUP until ctx ends.
func reloadOnHangup(ctx context.Context, log *slog.Logger, reload func() error) {
	if reload == nil {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := reload(); err != nil {
					log.Error("reload certificates and tokens: keeping the previous ones", "err", err)
				} else {
					log.Info("reloaded certificates and tokens")
				}
			}
		}
	}()
}

// etcdSecurity are the flags of a connection to an external etcd.
type etcdSecurity struct {
	ca, cert, key      string
	username, password string
}

func (e *etcdSecurity) register(cmd *cobra.Command, getenv func(string) string) {
	f := cmd.Flags()
	f.StringVar(&e.ca, "etcd-ca", getenv("REEVE_ETCD_CA"), "CA certificate(s) of etcd's server certificate; turns on TLS to etcd (env REEVE_ETCD_CA)")
	f.StringVar(&e.cert, "etcd-cert", getenv("REEVE_ETCD_CERT"), "client certificate for etcd (env REEVE_ETCD_CERT)")
	f.StringVar(&e.key, "etcd-key", getenv("REEVE_ETCD_KEY"), "private key of --etcd-cert (env REEVE_ETCD_KEY)")
	f.StringVar(&e.username, "etcd-username", getenv("REEVE_ETCD_USERNAME"), "etcd user (env REEVE_ETCD_USERNAME)")
	f.StringVar(&e.password, "etcd-password", getenv("REEVE_ETCD_PASSWORD"), "password of --etcd-username (prefer env REEVE_ETCD_PASSWORD: flags show in ps)")
}

// apply sets TLS and credentials on an etcd client configuration.
func (e *etcdSecurity) apply(cfg *clientv3.Config) error {
	if e.ca != "" || e.cert != "" || e.key != "" {
		t, err := tlsconfig.Client(tlsconfig.Files{CA: e.ca, Cert: e.cert, Key: e.key}, "")
		if err != nil {
			return usagef("--etcd-ca/--etcd-cert/--etcd-key: %v", err)
		}
		cfg.TLS = t
	}
	if (e.username == "") != (e.password == "") {
		return usageError{errors.New("--etcd-username and --etcd-password go together")}
	}
	cfg.Username, cfg.Password = e.username, e.password
	return nil
}

// describe says how a server is secured, for its start-up line.
func describe(opts []grpc.ServerOption) string {
	if len(opts) == 0 {
		return "plaintext"
	}
	if len(opts) == 1 {
		return "TLS"
	}
	return "TLS with role checks"
}

// limitFlags are a scheduler's admission limits.
type limitFlags struct {
	submitRate  float64
	submitBurst int
	maxActive   int
	overload    overloadFlags
}

func (l *limitFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.Float64Var(&l.submitRate, "submit-rate", 0, "task submissions per second per client (identity, or IP without auth); 0: unlimited")
	f.IntVar(&l.submitBurst, "submit-burst", 100, "burst of --submit-rate")
	f.IntVar(&l.maxActive, "max-active-tasks", 0, "non-terminal tasks per namespace; 0: unlimited")
	l.overload.register(f)
}

// overloadFlags are a scheduler's shedding settings (scheduler.WithOverload,
// WithOverloadAgentQueues, WithOverloadCPU).
type overloadFlags struct {
	target, interval, cpu time.Duration
	agents                bool
}

func (o *overloadFlags) register(f *pflag.FlagSet) {
	f.DurationVar(&o.target, "overload-target", scheduler.DefaultOverloadTarget, "shed new tasks (RESOURCE_EXHAUSTED, OVERLOADED) while new tasks keep waiting longer than this for etcd (and, with --overload-agent-queues, steps for an agent); 0: never shed")
	f.BoolVar(&o.agents, "overload-agent-queues", false, "also shed the workflows of a step type whose steps keep waiting longer than --overload-target for an agent (default: such steps queue, bounded by their schedule-to-start timeout)")
	f.DurationVar(&o.interval, "overload-interval", scheduler.DefaultOverloadInterval, "how long the wait must stay over --overload-target before shedding starts, and how often the shed share is adjusted")
	f.DurationVar(&o.cpu, "overload-cpu-target", 0, "also shed new tasks while this process's goroutines keep waiting longer than this for a CPU (the 90th percentile of the Go run queue's waits per --overload-interval), e.g. 1ms: lower latency past capacity, at the price of refusing some tasks near it; 0: off; needs --overload-target above 0")
}

// check refuses overload flags out of range, naming the flag.
func (o *overloadFlags) check() error {
	switch {
	case o.target < 0 || o.target > time.Minute:
		return usagef("--overload-target: want 0 (off) to 1m, got %s", o.target)
	case o.interval < 10*time.Millisecond || o.interval > time.Minute:
		return usagef("--overload-interval: want 10ms to 1m, got %s", o.interval)
	case o.cpu < 0 || o.cpu > time.Second:
		return usagef("--overload-cpu-target: want 0 (off) to 1s, got %s", o.cpu)
	case o.cpu > 0 && o.target == 0:
		return usagef("--overload-cpu-target: shedding is off (--overload-target 0); give both or neither")
	}
	return nil
}

func (o *overloadFlags) options() []scheduler.Option {
	return []scheduler.Option{scheduler.WithOverload(o.target, o.interval), scheduler.WithOverloadAgentQueues(o.agents), scheduler.WithOverloadCPU(o.cpu)}
}

func (l *limitFlags) check() error { return l.overload.check() }

func (l *limitFlags) options() []scheduler.Option {
	return append([]scheduler.Option{scheduler.WithSubmitRate(l.submitRate, l.submitBurst), scheduler.WithMaxActiveTasks(l.maxActive)},
		l.overload.options()...)
}
