package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
)

// sampler reads every task record and the deadline index at one etcd
// revision, repeatedly during the run, and records every dispatched step
// (RUNNING, or COMPENSATING held by an agent) that has no complete-by, no
// deadline key for exactly its (complete-by, attempt), or a complete-by
// more than window in the past.
type sampler struct {
	cli    *clientv3.Client
	window time.Duration

	mu         sync.Mutex
	samples    int
	failed     int // reads that failed (etcd faults): not samples
	maxRunning int
	violations []Violation
}

func newSampler(cli *clientv3.Client, window time.Duration) *sampler {
	return &sampler{cli: cli, window: window}
}

func (s *sampler) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.sample(ctx)
	}
}

func (s *sampler) sample(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	now := time.Now()
	tasks, err := s.cli.Get(rctx, layout.Tasks(""), clientv3.WithPrefix())
	if err != nil {
		s.mu.Lock()
		s.failed++
		s.mu.Unlock()
		return
	}
	dl, err := s.cli.Get(rctx, layout.Deadlines(), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(tasks.Header.Revision))
	if err != nil {
		s.mu.Lock()
		s.failed++
		s.mu.Unlock()
		return
	}
	deadlines := make(map[string]string, len(dl.Kvs))
	for _, kv := range dl.Kvs {
		deadlines[string(kv.Key)] = ""
	}
	// An attempt holding a max_running slot has its complete-by in the
	// slot key's value.
	sl, err := s.cli.Get(rctx, layout.Slots(), clientv3.WithPrefix(), clientv3.WithRev(tasks.Header.Revision))
	if err != nil {
		s.mu.Lock()
		s.failed++
		s.mu.Unlock()
		return
	}
	for _, kv := range sl.Kvs {
		deadlines[string(kv.Key)] = string(kv.Value)
	}
	var found []Violation
	running := 0
	for _, kv := range tasks.Kvs {
		var rec storev1.TaskRecord
		if err := store.UnmarshalRecord(kv.Value, &rec); err != nil {
			found = append(found, Violation{Invariant: "sample", Task: string(kv.Key), Detail: err.Error()})
			continue
		}
		t := rec.GetTask()
		for _, st := range t.GetSteps() {
			held := st.GetState() == reevev1.StepState_STEP_STATE_RUNNING ||
				(st.GetState() == reevev1.StepState_STEP_STATE_COMPENSATING && st.GetLockedByAgent() != "")
			if !held {
				continue
			}
			running++
			v := Violation{Invariant: "running step has a future deadline", Task: t.GetId(), Step: st.GetName(), Attempt: st.GetAttempt()}
			switch {
			case st.GetCompleteBy() == nil:
				v.Detail = fmt.Sprintf("%s without complete-by at revision %d", st.GetState(), tasks.Header.Revision)
			case !hasDeadline(deadlines, layout, t, st):
				v.Detail = fmt.Sprintf("%s with complete-by %s but no deadline key at revision %d", st.GetState(), st.GetCompleteBy().AsTime().UTC().Format(time.RFC3339Nano), tasks.Header.Revision)
			case st.GetCompleteBy().AsTime().Add(s.window).Before(now):
				v.Detail = fmt.Sprintf("%s with complete-by %s, more than %v before the sample at %s", st.GetState(),
					st.GetCompleteBy().AsTime().UTC().Format(time.RFC3339Nano), s.window, now.UTC().Format(time.RFC3339Nano))
			default:
				continue
			}
			found = append(found, v)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	s.maxRunning = max(s.maxRunning, running)
	s.violations = append(s.violations, found...)
}

func (s *sampler) report(r *Report) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.Samples = s.samples
	r.SamplesFailed = s.failed
	r.MaxRunningSeen = s.maxRunning
	for _, v := range s.violations {
		r.add(v)
	}
}

// hasDeadline reports whether the key that indexes a dispatched step's
// complete-by exists (with the value it must hold, for a slot key).
func hasDeadline(keys map[string]string, layout store.Layout, t *reevev1.Task, st *reevev1.Step) bool {
	key, want := layout.StepDeadline(t, st)
	val, ok := keys[key]
	return ok && val == want
}
