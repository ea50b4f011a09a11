package supervisor

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

type options struct {
	id         string
	prefix     string
	tick       time.Duration
	sessionTTL int
	batch      int
	log        *slog.Logger
	clock      clockwork.Clock
	tracer     trace.TracerProvider
	meter      metric.MeterProvider
}

func defaultOptions() options {
	host, _ := os.Hostname()
	return options{
		id:         fmt.Sprintf("%s-%s", host, uuid.NewString()[:8]),
		prefix:     "/reeve/",
		tick:       5 * time.Second,
		sessionTTL: 10,
		batch:      1000,
		log:        slog.Default(),
		clock:      clockwork.NewRealClock(),
		tracer:     otel.GetTracerProvider(),
		meter:      otel.GetMeterProvider(),
	}
}

// Option configures a Supervisor.
type Option func(*options)

// WithID sets the supervisor's id, recorded in task histories as
// supervisor/<id>; default "<hostname>-<random>".
func WithID(id string) Option { return func(o *options) { o.id = id } }

// WithPrefix sets the etcd key prefix; default "/reeve/". It must match the
// schedulers'.
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithTick sets the leader's safety-net pass over the deadline index;
// default 5s. The leader does not wait for it: it wakes at the earliest
// deadline in the index, which a watch on the index keeps current, so an
// expiry is acted on within milliseconds. The tick only bounds how late an
// expiry can be noticed if that watch misses something.
func WithTick(d time.Duration) Option { return func(o *options) { o.tick = d } }

// WithSessionTTL sets the TTL, in seconds, of the etcd session that holds
// leadership; default 10 (etcd's minimum is about 2). A crashed leader is
// replaced within about this long.
func WithSessionTTL(seconds int) Option { return func(o *options) { o.sessionTTL = seconds } }

// WithBatch sets how many expired deadline keys the leader reads per page of
// the index; default 1000. A pass reads pages until the expired part of the
// index is drained, and sends decisions to schedulers 256 per RecoverSteps
// call.
func WithBatch(n int) Option { return func(o *options) { o.batch = n } }

// WithLogger sets the logger; default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithClock sets the clock, for tests; default the real clock.
func WithClock(c clockwork.Clock) Option { return func(o *options) { o.clock = c } }

// WithTracerProvider sets where the supervisor's decision spans go; default
// the global provider (a no-op unless telemetry is set up).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(o *options) { o.tracer = tp } }

// WithMeterProvider sets where the supervisor's metrics go; default the
// global provider.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.meter = mp } }
