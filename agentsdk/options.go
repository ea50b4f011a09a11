package agentsdk

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

type options struct {
	agentID         string
	namespace       string
	maxConcurrent   int
	resultQueue     int // 0: maxConcurrent
	log             *slog.Logger
	dialOpts        []grpc.DialOption
	dialOptsSet     bool        // WithDialOptions was used
	tls             *tls.Config // nil: as dialOpts say (plaintext by default)
	tlsFiles        *TLSFiles   // read by New into tls
	token           string
	backoffMin      time.Duration
	backoffMax      time.Duration
	shutdownTimeout time.Duration
	tracer          trace.TracerProvider
	meter           metric.MeterProvider
}

func defaultOptions() options {
	host, _ := os.Hostname()
	return options{
		agentID:         fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.IntN(1<<16)),
		namespace:       "default",
		maxConcurrent:   16,
		log:             slog.Default(),
		backoffMin:      100 * time.Millisecond,
		backoffMax:      5 * time.Second,
		shutdownTimeout: 30 * time.Second,
		tracer:          otel.GetTracerProvider(),
		meter:           otel.GetMeterProvider(),
		dialOpts: []grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		},
	}
}

// Option configures an Agent.
type Option func(*options)

// WithAgentID sets the agent's identity; default "<hostname>-<pid>-<random>".
// It must stay the same across reconnects of one process (the SDK keeps it)
// and differ between processes: results are accepted only from the agent a
// step was assigned to.
func WithAgentID(id string) Option { return func(o *options) { o.agentID = id } }

// WithNamespace sets the namespace whose steps the agent serves; default "default".
func WithNamespace(ns string) Option { return func(o *options) { o.namespace = ns } }

// WithMaxConcurrentSteps bounds how many steps run at once; default 16.
func WithMaxConcurrentSteps(n int) Option { return func(o *options) { o.maxConcurrent = n } }

// WithResultQueue bounds how many results wait to be sent on the stream;
// default the max concurrent steps. When it is full (the stream is slow, or
// the scheduler stopped reading) a handler's goroutine waits after the
// handler returned until there is room or the step's complete-by passes;
// its result is never dropped: one not sent stays pending and goes out on
// the next stream. Assignment acks and heartbeats are not counted here: they
// are never dropped either, and heartbeats are merged.
func WithResultQueue(n int) Option { return func(o *options) { o.resultQueue = n } }

// WithLogger sets the logger; default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithDialOptions replaces the gRPC dial options; default plaintext with
// keepalive pings every 30s. Pass TLS credentials here.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts, o.dialOptsSet = opts, true }
}

// WithTLS connects over TLS with cfg (a client certificate in it makes it
// mutual TLS); default plaintext. It applies on top of WithDialOptions. A
// GetClientCertificate hook in cfg is called on every connection (each
// reconnect): supply renewed certificates through it, or use WithTLSFiles.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) { o.tls, o.tlsFiles = cfg, nil }
}

// TLSFiles names the PEM files of WithTLSFiles.
type TLSFiles struct {
	// CA is the bundle the scheduler's certificate must chain to; default
	// the system's roots. Read once, by New.
	CA string
	// Cert and Key are the agent's client certificate and private key
	// (mutual TLS); default none. Re-read when they change.
	Cert, Key string
	// ServerName is the name the scheduler's certificate is verified
	// against; default the host of the address dialed.
	ServerName string
}

// WithTLSFiles connects over TLS configured from files; default plaintext.
// The client certificate follows its files: every new connection (each
// reconnect) presents the pair they hold then, so a certificate renewed on
// disk (cert-manager, a SPIFFE helper) is used without a restart, while the
// stream already open keeps its connection. Files that hold no valid pair
// (half written, a key that does not match) leave the previous pair in use,
// with a warning on the agent's logger. New reports files it cannot read.
// It replaces WithTLS; it applies on top of WithDialOptions.
func WithTLSFiles(f TLSFiles) Option {
	return func(o *options) { o.tls, o.tlsFiles = nil, &f }
}

// WithToken sends tok as a bearer token on the stream; default none. gRPC
// sends tokens over TLS only: use it with WithTLS.
func WithToken(tok string) Option { return func(o *options) { o.token = tok } }

// dialOptions are the options of every connection.
func (o *options) dialOptions() []grpc.DialOption {
	opts := append([]grpc.DialOption(nil), o.dialOpts...)
	if o.tls != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(o.tls)))
	}
	if o.token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds(o.token)))
	}
	return opts
}

type tokenCreds string

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (tokenCreds) RequireTransportSecurity() bool { return true }

// WithReconnectBackoff sets the bounds of the jittered exponential backoff
// between connection attempts; default 100ms to 5s.
func WithReconnectBackoff(minWait, maxWait time.Duration) Option {
	return func(o *options) { o.backoffMin, o.backoffMax = minWait, maxWait }
}

// WithShutdownTimeout bounds how long Run waits, after its ctx ends, for
// running steps to finish and their results to be delivered; default 30s.
// Steps still running then have their ctx canceled.
func WithShutdownTimeout(d time.Duration) Option { return func(o *options) { o.shutdownTimeout = d } }

// WithTracerProvider sets where the agent's spans go; default the global
// provider (a no-op unless the program set one up). Each execution gets a
// span, reeve.step.execute, child of the scheduler's span for the attempt
// (from the assignment's trace context); handlers get it in their ctx.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(o *options) { o.tracer = tp } }

// WithMeterProvider sets where the agent's gRPC metrics go; default the
// global provider.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.meter = mp } }
