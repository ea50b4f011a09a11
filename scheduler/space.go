package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/reeve-org/reeve/internal/store"
)

// spaceGuard refuses new tasks while etcd is near its space quota, so that
// the room left is for the tasks already running: their results,
// completions and compensations are never refused by it. It reads etcd's
// status every check interval and keeps the last answer; a failed read keeps
// the previous one (with etcd down, submissions fail UNAVAILABLE anyway).
type spaceGuard struct {
	opts        *options
	store       *store.Store
	log         *slog.Logger
	last        atomic.Pointer[spaceReading]
	lastReclaim time.Time // only watch's goroutine uses it
	countRev    int64     // the revision of the last count of live work (watch's goroutine)
	counts      int64     // counts made (watch's goroutine; tests read it)
}

// watch refreshes the space until ctx ends.
func (g *spaceGuard) watch(ctx context.Context) {
	o := g.opts
	if o.spaceSoftLimit <= 0 || o.spaceCheckInterval <= 0 {
		return
	}
	t := o.clock.NewTicker(o.spaceCheckInterval)
	defer t.Stop()
	for {
		g.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
	}
}

// spaceReading is etcd's space with the room reserved for the work in
// flight: each execution queued or dispatched (counted from the ready and
// deadline indexes) will still write its claim, its result and its
// successors' records and history before compaction drops them.
type spaceReading struct {
	store.Space
	live     int64 // executions in flight (ready + deadline keys, an upper bound)
	reserved int64 // bytes reserved for them
}

func (g *spaceGuard) refresh(ctx context.Context) {
	raw, err := g.store.Space(ctx)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			g.log.Debug("read etcd space", "err", err)
		}
		return
	}
	sp := spaceReading{Space: raw}
	if per := g.opts.spaceReservePerStep; per > 0 {
		// etcd visits every key of a range it counts, so with many waiting
		// timers and steps (each a deadline key) a count costs etcd CPU in
		// proportion: while the store's revision has not moved since the
		// last count, nothing was written, and that count still holds.
		prev := g.last.Load()
		if prev != nil && raw.Revision != 0 && raw.Revision == g.countRev {
			sp.live, sp.reserved = prev.live, prev.reserved
		} else if ready, deadlines, rev, err := g.store.CountLive(ctx); err == nil {
			sp.live = ready + deadlines
			sp.reserved = sp.live * per
			g.countRev = rev
			g.counts++
		} else if prev != nil {
			sp.live, sp.reserved = prev.live, prev.reserved
		}
	}
	if g.over(sp) && g.opts.spaceReclaimEvery > 0 && (g.lastReclaim.IsZero() || g.opts.clock.Since(g.lastReclaim) >= g.opts.spaceReclaimEvery) {
		g.lastReclaim = g.opts.clock.Now()
		var after store.Space
		after, err = g.store.Reclaim(ctx)
		switch {
		case err != nil:
			g.log.Warn("reclaim etcd space (compact, defragment, disarm NOSPACE)", "space", sp.String(), "err", err)
		default:
			g.log.Info("reclaimed etcd space: compacted, defragmented, NOSPACE disarmed if the database fits again",
				"before", sp.String(), "after", after.String(), "nospace_alarm", after.NoSpace)
			sp.Space = after
		}
	}
	prev := g.last.Swap(&sp)
	was, is := prev != nil && g.over(*prev), g.over(sp)
	switch {
	case is && !was:
		g.log.Warn("etcd near its space quota: refusing new tasks", "space", sp.String(), "reserved_bytes", sp.reserved, "live_executions", sp.live, "nospace_alarm", sp.NoSpace, "soft_limit", g.opts.spaceSoftLimit)
	case was && !is:
		g.log.Info("etcd space back under the soft limit: accepting new tasks", "space", sp.String())
	}
}

func (g *spaceGuard) over(sp spaceReading) bool {
	return sp.NoSpace || sp.Quota > 0 && float64(sp.InUse+sp.reserved)/float64(sp.Quota) >= g.opts.spaceSoftLimit
}

// allow refuses a new task with RESOURCE_EXHAUSTED while the last reading
// was over the soft limit or etcd's NOSPACE alarm was raised.
func (g *spaceGuard) allow() error {
	sp := g.last.Load()
	if g.opts.spaceSoftLimit <= 0 || sp == nil || !g.over(*sp) {
		return nil
	}
	if sp.NoSpace {
		return refuse(codes.ResourceExhausted, ReasonNoSpace,
			"etcd is out of space (NOSPACE alarm; %s): new tasks are refused until space is freed; the scheduler compacts and defragments etcd and disarms the alarm by itself once the database fits again; if live data fills it, delete data or raise the quota (see docs/degraded-modes.md; etcdctl alarm disarm)", sp)
	}
	return refuse(codes.ResourceExhausted, ReasonNoSpace,
		"etcd is near its space quota: %s, plus %.1f MiB reserved for the %d executions in flight to finish, at or over the %.0f%% soft limit; new tasks are refused until running tasks finish and retention and compaction free space, running tasks continue",
		sp.Space, float64(sp.reserved)/(1<<20), sp.live, 100*g.opts.spaceSoftLimit)
}
