package scheduler

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

	"github.com/reeve-org/reeve/internal/archive"
	"github.com/reeve-org/reeve/internal/store"
)

type options struct {
	storeOpts           []store.Option // store tuning (WithCommitWindow)
	id                  string
	prefix              string
	log                 *slog.Logger
	clock               clockwork.Clock
	retention           time.Duration
	sweepInterval       time.Duration
	drainTimeout        time.Duration
	claimConcurrency    int
	dispatchOnSubmit    bool
	sessionTTL          int
	scheduleToStart     time.Duration
	fireAhead           time.Duration
	spaceSoftLimit      float64
	spaceCheckInterval  time.Duration
	submitRate          float64
	submitBurst         int
	maxActiveTasks      int
	ackTimeout          time.Duration
	registerTimeout     time.Duration
	maxUnregistered     int
	maxConnsPerPeer     int
	sendQueueBytes      int64
	tracer              trace.TracerProvider
	meter               metric.MeterProvider
	maxLists            int
	listBytes           int
	watchBytes          int64
	maxTxnOps           int
	spaceReclaimEvery   time.Duration
	spaceReservePerStep int64
	archive             archive.Archive
	archiveGrace        time.Duration
	archiveRetention    time.Duration
	archiveInterval     time.Duration
	archiveDedupWindow  time.Duration
	overloadTarget      time.Duration
	overloadInterval    time.Duration
	overloadAgents      bool
	overloadCPU         time.Duration
	runQueueWait        func() time.Duration // tests: the CPU controller's measure; nil: the runtime's
}

func defaultOptions() options {
	host, _ := os.Hostname()
	return options{
		id:                  fmt.Sprintf("%s-%s", host, uuid.NewString()[:8]),
		prefix:              "/reeve/",
		log:                 slog.Default(),
		clock:               clockwork.NewRealClock(),
		retention:           72 * time.Hour,
		sweepInterval:       time.Minute,
		archiveRetention:    30 * 24 * time.Hour,
		archiveInterval:     5 * time.Second,
		archiveDedupWindow:  DefaultArchiveDedupWindow,
		drainTimeout:        10 * time.Second,
		claimConcurrency:    256,
		dispatchOnSubmit:    true,
		sessionTTL:          10,
		scheduleToStart:     time.Hour,
		fireAhead:           DefaultScheduleFireAhead,
		spaceSoftLimit:      0.8,
		spaceCheckInterval:  5 * time.Second,
		ackTimeout:          5 * time.Second,
		registerTimeout:     10 * time.Second,
		maxUnregistered:     1000,
		maxConnsPerPeer:     1000,
		sendQueueBytes:      16 << 20,
		tracer:              otel.GetTracerProvider(),
		meter:               otel.GetMeterProvider(),
		maxLists:            8,
		listBytes:           2 << 20,
		watchBytes:          16 << 20,
		spaceReclaimEvery:   time.Minute,
		spaceReservePerStep: 4 << 10,
		overloadTarget:      DefaultOverloadTarget,
		overloadInterval:    DefaultOverloadInterval,
	}
}

// Option configures a Server.
type Option func(*options)

// WithEmbeddedDefragmenter tells a scheduler whose etcd client is
// in process (reeve dev, reeve bench --embedded) how to defragment that
// member when it reclaims space (etcdserver.Server.Defragment); etcd's
// in-process client cannot. Not needed with a network client.
func WithEmbeddedDefragmenter(f func() error) Option {
	return func(o *options) { o.storeOpts = append(o.storeOpts, store.WithDefragmenter(f)) }
}

// WithCommitWindow sets the store's adaptive commit window; default 1ms, 0
// turns it off. While task writes arrive less than d apart, a small batch
// of writes waits until its oldest has waited d (or until 16 are queued) so
// that they share one etcd transaction: fewer transactions and less CPU per
// task at moderate load, for at most d more latency per write. See
// docs/architecture.md (group commit).
func WithCommitWindow(d time.Duration) Option {
	return func(o *options) { o.storeOpts = append(o.storeOpts, store.WithCommitWindow(d)) }
}

// WithRecordCompression makes the scheduler write task records compressed
// (zstd with a built-in dictionary: about a third of a small record's
// size, so each task transition writes less to etcd); default off. Every
// Reeve reads both formats; turn it on once every scheduler, supervisor
// and reeve verify that reads this etcd runs a Reeve that does (this one
// or later): an older one cannot decode a compressed record. See
// docs/operations.md.
func WithRecordCompression(on bool) Option {
	return func(o *options) { o.storeOpts = append(o.storeOpts, store.WithRecordCompression(on)) }
}

// WithSessionTTL sets the TTL, in seconds, of the etcd lease under which the
// scheduler publishes itself and its agents; default 10. When the scheduler
// dies, its agents' records vanish this long after, and the supervisor then
// acts on their heartbeat executions.
func WithSessionTTL(seconds int) Option { return func(o *options) { o.sessionTTL = max(seconds, 1) } }

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

// WithClaimConcurrency bounds the claims in flight; default 256. Claims in
// flight together share etcd transactions (group commit in the store).
func WithClaimConcurrency(n int) Option { return func(o *options) { o.claimConcurrency = n } }

// WithDispatchOnSubmit, on by default, lets a submission whose first ready
// step an agent of this scheduler has room for, while no step of that type
// waits here, be written already claimed by that agent: one etcd write
// instead of two (create, then claim), and no ready key. Off, every step
// goes through the ready queue.
func WithDispatchOnSubmit(on bool) Option { return func(o *options) { o.dispatchOnSubmit = on } }

// WithTracerProvider sets where the scheduler's spans go; default the
// global provider (a no-op unless telemetry is set up). Build it with
// telemetry.IDGenerator so that attempt spans get their derived ids.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(o *options) { o.tracer = tp } }

// WithMeterProvider sets where the scheduler's metrics go; default the
// global provider.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.meter = mp } }

// WithEtcdMaxTxnOps tells the scheduler etcd's limit on operations per
// transaction (etcd's --max-txn-ops; default 128, etcd's default): writes
// are batched to fit it and workflows whose widest transition would exceed
// it are refused at registration (see docs/limits.md). Set it to the value
// every etcd member runs with, never higher.
func WithEtcdMaxTxnOps(n int) Option { return func(o *options) { o.maxTxnOps = n } }

// WithDefaultScheduleToStart sets the schedule-to-start timeout of steps
// whose step and workflow set none: a submitted task's workflow snapshot
// records it as default_schedule_to_start_timeout. Default 1h, so that every
// queued step has a deadline the supervisor acts on (retry, then the step's
// escalation: an operator alert when it fails). 0: no limit, a queued step
// waits until an agent of its type connects. Between 100ms and 24h when set.
func WithDefaultScheduleToStart(d time.Duration) Option {
	return func(o *options) { o.scheduleToStart = d }
}

// DefaultScheduleFireAhead is how long before its time a schedule's run
// is fired by default (WithScheduleFireAhead).
const DefaultScheduleFireAhead = 5 * time.Second

// MaxScheduleFireAhead bounds WithScheduleFireAhead.
const MaxScheduleFireAhead = time.Minute

// WithScheduleFireAhead sets how long before its firing time (nominal
// time plus jitter) a schedule's run is fired: its task is submitted then
// with that time as its start time (a delayed start), so that at the time
// only the start is left (docs/schedules.md, "Firing ahead"). Under an
// overlap policy other than allow_all a time is fired ahead only while no
// run of the schedule is active; else at its time. 0 fires every time at
// its time. Default DefaultScheduleFireAhead; at most
// MaxScheduleFireAhead.
func WithScheduleFireAhead(d time.Duration) Option {
	return func(o *options) { o.fireAhead = min(max(d, 0), MaxScheduleFireAhead) }
}

// WithSubmitRate limits each client to r task submissions per second with
// bursts of burst (a token bucket per client: its authenticated identity, or
// its IP address when authorization is off); over it SubmitTask fails with
// RESOURCE_EXHAUSTED. Default r = 0: unlimited.
func WithSubmitRate(r float64, burst int) Option {
	return func(o *options) { o.submitRate, o.submitBurst = r, max(burst, 1) }
}

// WithOverload sheds new tasks past capacity: while the work this
// scheduler dispatches, or the tasks it creates, keep waiting longer than
// target (the least wait of each interval is over it: a standing queue, not
// a burst), SubmitTask refuses a growing share of new tasks with
// RESOURCE_EXHAUSTED (reason OVERLOADED, a RetryInfo of the measured wait
// plus one interval) before any etcd work, and admits them all again as the
// wait falls back under target. Waits are measured per step type, so a type
// whose agents are saturated sheds the workflows that use it only, with
// WithOverloadAgentQueues. Default
// target 50ms, interval 100ms; target 0 turns shedding off. An interval
// under 10ms is raised to 10ms. See overload.go and docs/architecture.md
// (overload).
func WithOverload(target, interval time.Duration) Option {
	return func(o *options) {
		o.overloadTarget, o.overloadInterval = max(target, 0), max(interval, 10*time.Millisecond)
	}
}

// WithOverloadAgentQueues also sheds the workflows of a step type whose
// steps keep waiting longer than the overload target for an agent (the
// per-type controllers). Default off: steps queue for their agents, as a
// task queue's backlog does, bounded by their schedule-to-start timeout;
// only new tasks' wait for etcd (this scheduler's and etcd's own capacity)
// sheds.
func WithOverloadAgentQueues(on bool) Option { return func(o *options) { o.overloadAgents = on } }

// WithOverloadCPU also sheds new tasks while this process's goroutines
// keep waiting longer than target for a CPU: the 90th percentile of the Go
// runtime's run-queue waits (runtime/metrics /sched/latencies:seconds) of
// each overload interval, with the control law of WithOverload. It bounds
// the latency of admitted tasks where the scheduler's CPU (or, with an
// embedded etcd, the process's) is what runs out, at the price of
// refusing some below the throughput the CPU could reach with every
// queue full: a CPU near saturation already queues goroutines. Default 0:
// off. See docs/architecture.md (overload shedding).
func WithOverloadCPU(target time.Duration) Option {
	return func(o *options) { o.overloadCPU = max(target, 0) }
}

// WithMaxActiveTasks caps the non-terminal tasks of each namespace; a
// submission over it fails with RESOURCE_EXHAUSTED. The count is refreshed
// from etcd once per second per namespace, so concurrent schedulers can
// overshoot by what they accept within that second. Default 0: unlimited.
func WithMaxActiveTasks(n int) Option { return func(o *options) { o.maxActiveTasks = n } }

// WithSpaceSoftLimit refuses new tasks (SubmitTask fails with
// RESOURCE_EXHAUSTED) while etcd's database in use reaches this fraction of
// its space quota, or while etcd's NOSPACE alarm is raised, so that the rest
// is left to running tasks: their results, completions and compensations
// still apply. Default 0.8; 0 disables the check. The space is read every
// check interval (WithSpaceCheckInterval), so a burst can overshoot by what
// is submitted within one interval.
func WithSpaceSoftLimit(fraction float64) Option {
	return func(o *options) { o.spaceSoftLimit = fraction }
}

// WithSpaceReserve sets the etcd space reserved for each execution in
// flight (queued or dispatched): what it will still write (claim, result,
// its successors, history) before compaction frees it. New tasks are
// refused while the database in use plus this reserve reaches the soft
// limit, so that work already admitted can finish within the quota.
// Default 4 KiB (a one-step task's whole life leaves about 2.65 KB of
// history); 0 reserves nothing.
func WithSpaceReserve(bytesPerStep int64) Option {
	return func(o *options) { o.spaceReservePerStep = max(bytesPerStep, 0) }
}

// WithSpaceReclaim sets how often, at most, the scheduler reclaims etcd
// space by itself while the space is over the soft limit or etcd's NOSPACE
// alarm is raised: it compacts etcd's history to the current revision,
// defragments every member one at a time (each blocks for the time of its
// defragmentation) and disarms NOSPACE once the database file is under 90%
// of the quota. Default 1m; 0 leaves it to an operator. Requires the space
// check (WithSpaceSoftLimit > 0).
func WithSpaceReclaim(every time.Duration) Option {
	return func(o *options) { o.spaceReclaimEvery = every }
}

// WithSpaceCheckInterval sets how often etcd's space is read (one status and
// one alarm request per etcd member); default 5s.
func WithSpaceCheckInterval(d time.Duration) Option {
	return func(o *options) { o.spaceCheckInterval = d }
}

// WithMaxConcurrentLists bounds the ListTasks calls one scheduler serves at
// once; a call that finds no free slot within a second fails with
// RESOURCE_EXHAUSTED. With the page byte budget (WithListBytes) it bounds
// the memory lists take: about n × (budget + 256 KiB of records, or up to
// 4 records when records are larger). Default 8.
func WithMaxConcurrentLists(n int) Option { return func(o *options) { o.maxLists = n } }

// WithListBytes sets the byte budget of one ListTasks page: a page ends
// before the task that would take it past this many encoded bytes (a page
// always holds at least one task, however large). Default 2 MiB, half of
// gRPC's default 4 MiB receive limit.
func WithListBytes(n int) Option { return func(o *options) { o.listBytes = n } }

// WithWatchBufferBytes bounds what one WatchTasks stream holds for a client
// that reads slower than tasks change, in encoded bytes of the changes (as
// well as watchBuffer changes): past it the stream ends with
// RESOURCE_EXHAUSTED and the client watches again from the revision it
// reached. A single change larger than n is still sent. Default 16 MiB: a
// few slow full-view watchers of large tasks cannot take the scheduler's
// memory.
func WithWatchBufferBytes(n int64) Option { return func(o *options) { o.watchBytes = n } }

// WithAckTimeout sets how long an agent may leave an assignment
// unacknowledged (AssignmentAck); default 5s. Past it the attempt is taken
// back — it never started, so it is queued again at once for another agent
// and does not count against the step's retry limit — and the agent is
// marked stuck: it gets no work but a single probe assignment every 30s
// until it acknowledges one. The Go SDK acks on receipt, so the default
// leaves a loaded machine a wide margin; raise it for agents behind slow
// links.
func WithAckTimeout(d time.Duration) Option { return func(o *options) { o.ackTimeout = d } }

// WithSendQueueBytes bounds the encoded bytes queued for one agent stream
// and not yet handed to gRPC; default 16 MiB. An agent whose queue is full
// gets no new assignments until it drained to half; an assignment that
// does not fit is taken back at once (queued again for another agent). A
// single assignment larger than the bound is still admitted into an empty
// queue, and the small control messages (acks, cancels, drain) are bounded
// by the queue's message count only.
func WithSendQueueBytes(n int64) Option { return func(o *options) { o.sendQueueBytes = n } }

// WithRegisterTimeout bounds how long a new AgentService.Connect stream may
// wait before its first message, Register; default 10s. Past it the stream
// ends with DEADLINE_EXCEEDED.
func WithRegisterTimeout(d time.Duration) Option { return func(o *options) { o.registerTimeout = d } }

// WithMaxUnregisteredStreams caps the Connect streams that have not sent
// Register yet; default 1000. Past it a new stream ends at once with
// RESOURCE_EXHAUSTED (and a RetryInfo detail).
func WithMaxUnregisteredStreams(n int) Option { return func(o *options) { o.maxUnregistered = n } }

// WithMaxConnectionsPerPeer caps the connections one remote IP address may
// hold open on the listener returned by Server.Listener; default 1000 (room
// for a fleet of agents behind one NAT address); 0: no cap. Past it a new
// connection is closed at once. Behind a load balancer that does not keep
// client addresses every connection comes from its address: set 0 there and
// cap at the balancer.
func WithMaxConnectionsPerPeer(n int) Option { return func(o *options) { o.maxConnsPerPeer = n } }
