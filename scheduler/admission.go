package scheduler

import (
	"context"
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/auth"
	"github.com/reeve-org/reeve/internal/store"
)

// activeCountTTL is how long a namespace's count of active tasks is reused
// before it is read from etcd again.
const activeCountTTL = time.Second

// maxRateClients bounds the per-client limiters kept; past it, limiters idle
// for a minute are dropped.
const maxRateClients = 10000

// admission is the chain of limits a validated submission passes, in this
// order (admit): the caller's token bucket, etcd's space (space.go), the
// namespace's cap on active (non-terminal) tasks, and the scheduler's
// capacity (shedding, overload.go); and the slots of concurrent lists
// (acquireList). Each step refuses with a status that says when to retry;
// what a refused submission that repeats an earlier one gets is
// SubmitTask's rule (resubmitted, submit.go).
type admission struct {
	opts  *options
	store *store.Store // the active-task counts
	space *spaceGuard
	shed  *overload     // nil when shedding is off
	lists chan struct{} // one slot per ListTasks in progress (WithMaxConcurrentLists)

	mu       sync.Mutex
	limiters map[string]*clientLimiter
	active   map[string]*activeCount
}

type clientLimiter struct {
	lim  *rate.Limiter
	used time.Time
}

// activeCount is a namespace's active tasks as last read from etcd, plus the
// tasks this scheduler created since.
type activeCount struct {
	mu      sync.Mutex // one etcd read per namespace at a time
	read    int64
	since   int64
	readAt  time.Time
	invalid bool
}

func newAdmission(o *options, st *store.Store, space *spaceGuard, shed *overload) *admission {
	return &admission{
		opts: o, store: st, space: space, shed: shed, lists: make(chan struct{}, max(o.maxLists, 1)),
		limiters: map[string]*clientLimiter{}, active: map[string]*activeCount{},
	}
}

// admit runs the chain for a submission of wf in ns and returns the first
// refusal, or nil.
func (a *admission) admit(ctx context.Context, ns string, wf *reevev1.Workflow) error {
	if err := a.allowSubmit(ctx); err != nil {
		return err
	}
	if err := a.space.allow(); err != nil {
		return err
	}
	if err := a.allowActive(ctx, ns); err != nil {
		return err
	}
	return a.shed.allow(ns, wf)
}

// clientKey names the caller for rate limiting: its authenticated identity,
// else its IP address.
func clientKey(ctx context.Context) string {
	if p := auth.FromContext(ctx); p != nil {
		return p.Name
	}
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		if host, _, err := net.SplitHostPort(pr.Addr.String()); err == nil {
			return "ip:" + host
		}
		return "addr:" + pr.Addr.String()
	}
	return "anonymous"
}

// allowSubmit takes a token from the caller's bucket, or refuses with
// RESOURCE_EXHAUSTED.
func (a *admission) allowSubmit(ctx context.Context) error {
	o := a.opts
	if o.submitRate <= 0 {
		return nil
	}
	key := clientKey(ctx)
	now := o.clock.Now()
	a.mu.Lock()
	l := a.limiters[key]
	if l == nil {
		if len(a.limiters) >= maxRateClients {
			for k, v := range a.limiters {
				if now.Sub(v.used) > time.Minute {
					delete(a.limiters, k)
				}
			}
		}
		l = &clientLimiter{lim: rate.NewLimiter(rate.Limit(o.submitRate), o.submitBurst)}
		a.limiters[key] = l
	}
	l.used = now
	ok := l.lim.AllowN(now, 1)
	a.mu.Unlock()
	if !ok {
		return refuse(codes.ResourceExhausted, ReasonRateLimited, "submit rate: %s is over %g submissions/s (burst %d); retry with backoff", key, o.submitRate, o.submitBurst)
	}
	return nil
}

func (a *admission) count(ns string) *activeCount {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.active[ns]
	if c == nil {
		c = &activeCount{invalid: true}
		a.active[ns] = c
	}
	return c
}

// allowActive refuses, with RESOURCE_EXHAUSTED, a new task in ns when the
// namespace has max active tasks. The count is read from etcd at most once
// per second per namespace and the tasks created here since are added: with
// several schedulers a burst within that second can overshoot the limit.
func (a *admission) allowActive(ctx context.Context, ns string) error {
	limit := int64(a.opts.maxActiveTasks)
	if limit <= 0 {
		return nil
	}
	c := a.count(ns)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := a.opts.clock.Now()
	if c.invalid || now.Sub(c.readAt) >= activeCountTTL {
		n, err := a.store.CountActive(ctx, ns)
		if err != nil {
			return err
		}
		c.read, c.since, c.readAt, c.invalid = n, 0, now, false
	}
	if c.read+c.since >= limit {
		return refuse(codes.ResourceExhausted, ReasonActiveTaskLimit, "namespace: %q has %d active tasks, the limit is %d; retry when some finish", ns, c.read+c.since, limit)
	}
	return nil
}

// created records a task created in ns.
func (a *admission) created(ns string) {
	if a.opts.maxActiveTasks <= 0 {
		return
	}
	c := a.count(ns)
	c.mu.Lock()
	c.since++
	c.mu.Unlock()
}

// acquireList takes one of the scheduler's list slots, waiting at most
// listWait; release gives it back.
func (a *admission) acquireList(ctx context.Context) (release func(), err error) {
	t := time.NewTimer(listWait)
	defer t.Stop()
	select {
	case a.lists <- struct{}{}:
		return func() { <-a.lists }, nil
	case <-t.C:
		return nil, statusErr(refuse(codes.ResourceExhausted, ReasonTooManyLists, "page_size: this scheduler already serves %d lists at once (the limit); retry with backoff or ask for smaller pages", cap(a.lists)))
	case <-ctx.Done():
		return nil, statusErr(ctx.Err())
	}
}
