package bench

import (
	"context"
	"slices"
	"sync"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
)

// samples is a concurrency-safe list of durations.
type samples struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *samples) add(d time.Duration) {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
}

func (s *samples) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.d)
}

// queueWaitSample bounds how many tasks queueWaits reads back.
const queueWaitSample = 20000

// queueWaits reads back the run's tasks (the first queueWaitSample in id
// order, which is submission order) and returns, for every step, how long
// it waited in the ready queue (ready to dispatched).
func queueWaits(ctx context.Context, st *store.Store) ([]time.Duration, error) {
	var out []time.Duration
	after := ""
	for read := 0; read < queueWaitSample; read += 1000 {
		tasks, more, err := st.ListTasks(ctx, "default", after, 1000)
		if err != nil {
			return nil, err
		}
		for _, t := range tasks {
			after = t.GetId()
			if t.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
				continue
			}
			ready := map[string]time.Time{}
			for _, h := range t.GetHistory() {
				switch h.GetKind() {
				case "step.ready":
					ready[h.GetStep()] = h.GetTime().AsTime()
				case "step.dispatched":
					if r, ok := ready[h.GetStep()]; ok {
						out = append(out, h.GetTime().AsTime().Sub(r))
					}
				}
			}
		}
		if !more {
			return out, nil
		}
	}
	return out, nil
}

func percentiles(d []time.Duration) (p50, p95, p99, maxMs float64) {
	if len(d) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(d)
	at := func(q float64) float64 {
		i := min(len(d)-1, int(q*float64(len(d))))
		return float64(d[i]) / float64(time.Millisecond)
	}
	return at(0.50), at(0.95), at(0.99), float64(d[len(d)-1]) / float64(time.Millisecond)
}
