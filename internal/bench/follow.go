package bench

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// followEnded reports ended tasks to done until ctx ends. When the watch
// breaks (under heavy load it can fall behind etcd's compaction, which
// cancels it) it follows again from the current revision and looks up once
// every task still waited for, so that no completion is missed; those found
// that way count as completed when found.
//
// Each is looked up through tasks: with an archive, a task etcd no longer
// holds is looked up there (it ended and moved).
func followEnded(ctx context.Context, st *store.Store, tasks *taskread.Reader, rev int64, done *completions) error {
	for {
		_ = st.WatchEnded(ctx, rev, done.finish)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
		cur, err := st.Revision(ctx)
		if err != nil {
			continue
		}
		rev = cur
		for _, id := range done.waitingIDs() {
			rec, _, err := tasks.Get(ctx, "default", id)
			if err != nil {
				continue
			}
			if state := rec.GetTask().GetState(); taskstate.TerminalTask(state) {
				done.finish("default", id, state.String())
			}
		}
	}
}

// completions connects the ended-task watch to the submitters.
type completions struct {
	mu       sync.Mutex
	waiting  map[string]chan struct{}
	ended    map[string]bool // ended before its submitter asked
	finished map[string]bool // reported once already
	failed   int
}

func newCompletions() *completions {
	return &completions{waiting: map[string]chan struct{}{}, ended: map[string]bool{}, finished: map[string]bool{}}
}

func (c *completions) waitingIDs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Collect(maps.Keys(c.waiting))
}

func (c *completions) expect(id string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	if c.ended[id] {
		close(ch)
		return ch
	}
	c.waiting[id] = ch
	return ch
}

func (c *completions) finish(_, id, state string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished[id] {
		return
	}
	c.finished[id] = true
	if state != reevev1.TaskState_TASK_STATE_SUCCEEDED.String() {
		c.failed++
	}
	if ch, ok := c.waiting[id]; ok {
		close(ch)
		delete(c.waiting, id)
		return
	}
	c.ended[id] = true
}

// forget drops a task that will never exist (its submission was refused).
func (c *completions) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waiting, id)
}

func (c *completions) failedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}
