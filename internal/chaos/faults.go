package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/reeve-org/reeve/internal/cluster"
)

// injector kills and restarts processes and adds toxics, one fault at a
// time at random intervals, each undone after a random duration. Its
// choices come from its own seeded rng, in one goroutine, so a seed gives
// the same schedule. Limits that keep the cluster able to make progress:
// at most one etcd member down (never quorum), at least one scheduler,
// supervisor and agent up.
type injector struct {
	c     *cluster.Cluster
	rng   *rand.Rand
	every time.Duration
	logf  func(string, ...any)
	start time.Time

	quit     chan struct{}
	quitOnce sync.Once

	mu        sync.Mutex
	undos     map[int]*undo
	nextID    int
	down      map[*cluster.Process]bool
	counts    map[string]int
	events    []string
	lastFault time.Time
	errs      []string
}

type undo struct {
	timer *time.Timer
	once  sync.Once
	fn    func()
}

func newInjector(c *cluster.Cluster, rng *rand.Rand, every time.Duration, logf func(string, ...any)) *injector {
	return &injector{c: c, rng: rng, every: every, logf: logf, start: time.Now(), quit: make(chan struct{}),
		undos: map[int]*undo{}, down: map[*cluster.Process]bool{}, counts: map[string]int{}}
}

// decision is one fault of the schedule, drawn from the rng before the
// injector looks at the cluster, so that the schedule depends on the seed
// alone (whether a kill is skipped by a limit depends on timing).
type decision struct {
	wait   time.Duration // after the previous fault
	kind   int           // [0, 100): which fault, see inject
	pick   int           // which process or proxy; toxic stream by parity
	dur    time.Duration // until undone
	toxic  int           // [0, 4): latency, reset_peer, timeout, bandwidth
	amount int           // [0, 1000): the toxic's strength
	tag    int           // toxic name suffix
}

// nextDecision draws the next fault of the schedule.
func nextDecision(rng *rand.Rand, every time.Duration) decision {
	return decision{
		wait:   time.Duration(float64(every) * (0.5 + rng.Float64())),
		kind:   rng.IntN(100),
		pick:   rng.IntN(1 << 20),
		dur:    500*time.Millisecond + time.Duration(rng.Int64N(int64(4500*time.Millisecond))),
		toxic:  rng.IntN(4),
		amount: rng.IntN(1000),
		tag:    rng.IntN(1 << 30),
	}
}

// run injects faults until stop is called or ctx ends.
func (in *injector) run(ctx context.Context) {
	for {
		d := nextDecision(in.rng, in.every)
		select {
		case <-ctx.Done():
			return
		case <-in.quit:
			return
		case <-time.After(d.wait):
		}
		in.inject(ctx, d)
	}
}

func (in *injector) stop() { in.quitOnce.Do(func() { close(in.quit) }) }

func (in *injector) inject(ctx context.Context, d decision) {
	switch {
	case d.kind < 12:
		in.kill("kill scheduler", in.c.Schedulers, d.pick, d.dur)
	case d.kind < 15:
		in.rollingRestart(ctx, in.c.Schedulers)
	case d.kind < 27:
		in.kill("kill supervisor", in.c.Supervisors, d.pick, d.dur)
	case d.kind < 45:
		in.kill("kill agent", in.c.Agents, d.pick, d.dur)
	case d.kind < 57:
		in.kill("kill etcd member", in.c.Etcd, d.pick, d.dur+time.Second)
	case d.kind < 80:
		in.network(ctx, in.c.SchedulerProxies, "agent→scheduler", d)
	default:
		in.network(ctx, in.c.EtcdProxies, "component→etcd", d)
	}
}

// kill SIGKILLs one running process of group, unless that would leave none
// running (for etcd: unless another member is down), and restarts it after d.
func (in *injector) kill(what string, group []*cluster.Process, pick int, d time.Duration) {
	in.mu.Lock()
	downInGroup := 0
	for _, p := range group {
		if in.down[p] {
			downInGroup++
		}
	}
	p := group[pick%len(group)]
	limit := len(group) - 1
	if what == "kill etcd member" {
		limit = (len(group) - 1) / 2 // keep a quorum
	}
	if in.down[p] || downInGroup+1 > limit {
		in.mu.Unlock()
		in.note("skip %s %s: limit", what, p.Name)
		return
	}
	in.down[p] = true
	in.mu.Unlock()
	if err := p.Kill(); err != nil {
		in.fail("kill %s: %v", p.Name, err)
	}
	in.count(what, fmt.Sprintf("%s %s (SIGKILL), restart in %v", what, p.Name, d.Round(time.Millisecond)))
	in.later(d, func() {
		if err := p.Start(); err != nil {
			in.fail("restart %s: %v", p.Name, err)
		}
		in.mu.Lock()
		delete(in.down, p)
		in.mu.Unlock()
		in.note("restarted %s", p.Name)
	})
}

// rollingRestart restarts every scheduler gracefully, one at a time, as a
// deployment does: SIGTERM, wait for it to exit (it drains its agents),
// start it again and wait until it serves before the next. Skipped while
// one is down; while it runs, no scheduler is killed.
func (in *injector) rollingRestart(ctx context.Context, group []*cluster.Process) {
	in.mu.Lock()
	for _, p := range group {
		if in.down[p] {
			in.mu.Unlock()
			in.note("skip rolling restart of schedulers: %s is down", p.Name)
			return
		}
	}
	for _, p := range group {
		in.down[p] = true
	}
	in.mu.Unlock()
	in.count("rolling restart of schedulers", "rolling restart of schedulers (SIGTERM, wait for exit, start, wait until serving; one at a time)")
	for _, p := range group {
		if err := p.Stop(30 * time.Second); err != nil {
			in.fail("rolling restart: stop %s: %v", p.Name, err)
		}
		if err := p.Start(); err != nil {
			in.fail("rolling restart: start %s: %v", p.Name, err)
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := in.c.WaitServing(wctx, p.Addr)
		cancel()
		if err != nil && ctx.Err() == nil {
			in.fail("rolling restart: %s not serving: %v", p.Name, err)
		}
		in.note("restarted %s gracefully", p.Name)
	}
	in.mu.Lock()
	for _, p := range group {
		delete(in.down, p)
	}
	in.lastFault = time.Now()
	in.mu.Unlock()
}

// network adds a toxic to one proxy of the link for d.
func (in *injector) network(ctx context.Context, proxies []string, link string, dec decision) {
	pick, toxic, amount, d := dec.pick, dec.toxic, dec.amount, dec.dur
	proxy := proxies[pick%len(proxies)]
	tx := cluster.Toxic{Toxicity: 1, Stream: "downstream"}
	if pick%2 == 1 {
		tx.Stream = "upstream"
	}
	switch toxic {
	case 0:
		tx.Type = "latency"
		tx.Attributes = map[string]int{"latency": 100 + amount/2, "jitter": 50}
	case 1:
		tx.Type = "reset_peer"
		tx.Attributes = map[string]int{"timeout": amount / 4}
	case 2:
		tx.Type = "timeout"
		tx.Attributes = map[string]int{"timeout": 500 + amount*2}
	case 3:
		tx.Type = "bandwidth"
		tx.Attributes = map[string]int{"rate": 8 + amount/16} // KB/s
	}
	tx.Name = fmt.Sprintf("%s-%s-%d", tx.Type, tx.Stream, dec.tag)
	if err := in.c.Proxy.AddToxic(ctx, proxy, tx); err != nil {
		in.fail("add toxic %s on %s: %v", tx.Name, proxy, err)
		return
	}
	what := "network " + tx.Type
	in.count(what, fmt.Sprintf("%s on %s %s (%s %v) for %v", what, link, proxy, tx.Stream, tx.Attributes, d.Round(time.Millisecond)))
	in.later(d, func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := in.c.Proxy.RemoveToxic(rctx, proxy, tx.Name); err != nil {
			in.fail("remove toxic %s on %s: %v", tx.Name, proxy, err)
		}
	})
}

// later runs fn after d, or at heal, whichever comes first, once.
func (in *injector) later(d time.Duration, fn func()) {
	in.mu.Lock()
	defer in.mu.Unlock()
	id := in.nextID
	in.nextID++
	u := &undo{fn: fn}
	in.undos[id] = u
	u.timer = time.AfterFunc(d, func() {
		u.once.Do(fn)
		in.mu.Lock()
		delete(in.undos, id)
		in.lastFault = time.Now()
		in.mu.Unlock()
	})
}

// heal undoes every fault still in effect (restarts what is down, removes
// toxics) and returns the moment the last fault ended.
func (in *injector) heal(ctx context.Context) time.Time {
	in.mu.Lock()
	var pending []*undo
	for id, u := range in.undos {
		pending = append(pending, u)
		delete(in.undos, id)
	}
	in.mu.Unlock()
	for _, u := range pending {
		u.timer.Stop()
		u.once.Do(u.fn)
	}
	if err := in.c.Proxy.Reset(ctx); err != nil {
		in.fail("reset toxiproxy: %v", err)
	}
	in.mu.Lock()
	if len(pending) > 0 || in.lastFault.IsZero() {
		in.lastFault = time.Now()
	}
	last := in.lastFault
	in.mu.Unlock()
	in.note("healed: %d faults undone early", len(pending))
	return last
}

func (in *injector) count(kind, msg string) {
	in.mu.Lock()
	in.counts[kind]++
	in.mu.Unlock()
	in.note("%s", msg)
}

func (in *injector) note(format string, args ...any) {
	line := fmt.Sprintf("%7.2fs %s", time.Since(in.start).Seconds(), fmt.Sprintf(format, args...))
	in.mu.Lock()
	in.events = append(in.events, line)
	in.mu.Unlock()
	in.logf("chaos: %s", line)
}

func (in *injector) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	in.mu.Lock()
	in.errs = append(in.errs, msg)
	in.mu.Unlock()
	in.note("error: %s", msg)
}

func (in *injector) report(r *Report) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for k, v := range in.counts {
		r.Faults[k] += v
		r.FaultsTotal += v
	}
	r.FaultLog = append(r.FaultLog, in.events...)
	r.InjectorErrors = append(r.InjectorErrors, in.errs...)
}
