package scheduler

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
)

type options struct {
	id               string
	prefix           string
	log              *slog.Logger
	clock            clockwork.Clock
	retention        time.Duration
	sweepInterval    time.Duration
	drainTimeout     time.Duration
	claimConcurrency int
	sessionTTL       int
	submitRate       float64
	submitBurst      int
	maxActiveTasks   int
}

func defaultOptions() options {
	host, _ := os.Hostname()
	return options{
		id:               fmt.Sprintf("%s-%s", host, uuid.NewString()[:8]),
		prefix:           "/reeve/",
		log:              slog.Default(),
		clock:            clockwork.NewRealClock(),
		retention:        72 * time.Hour,
		sweepInterval:    time.Minute,
		drainTimeout:     10 * time.Second,
		claimConcurrency: 64,
		sessionTTL:       10,
	}
}

// Option configures a Server.
type Option func(*options)

// WithID sets the scheduler instance id recorded as a step's locked-by;
// default "<hostname>-<random>". Ids must be unique among running schedulers.
func WithID(id string) Option { return func(o *options) { o.id = id } }

// WithPrefix sets the etcd key prefix; default "/reeve/".
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithLogger sets the logger; default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithClock sets the clock, for tests; default the real clock.
func WithClock(c clockwork.Clock) Option { return func(o *options) { o.clock = c } }

// WithRetention sets how long terminal tasks are kept before they are
// deleted; default 72h.
func WithRetention(d time.Duration) Option { return func(o *options) { o.retention = d } }

// WithSweepInterval sets how often terminal tasks past retention are looked
// for; default 1m.
func WithSweepInterval(d time.Duration) Option { return func(o *options) { o.sweepInterval = d } }

// WithDrainTimeout bounds how long shutdown waits for agents to move their
// streams elsewhere; default 10s.
func WithDrainTimeout(d time.Duration) Option { return func(o *options) { o.drainTimeout = d } }

// WithClaimConcurrency bounds concurrent claim transactions; default 64.
func WithClaimConcurrency(n int) Option { return func(o *options) { o.claimConcurrency = n } }

// WithSubmitRate limits each client to r task submissions per second with
// bursts of burst (a token bucket per client: its authenticated identity, or
// its IP address when authorization is off); over it SubmitTask fails with
// RESOURCE_EXHAUSTED. Default r = 0: unlimited.
func WithSubmitRate(r float64, burst int) Option {
	return func(o *options) { o.submitRate, o.submitBurst = r, max(burst, 1) }
}

// WithMaxActiveTasks caps the non-terminal tasks of each namespace; a
// submission over it fails with RESOURCE_EXHAUSTED. The count is refreshed
// from etcd once per second per namespace, so concurrent schedulers can
// overshoot by what they accept within that second. Default 0: unlimited.
func WithMaxActiveTasks(n int) Option { return func(o *options) { o.maxActiveTasks = n } }
