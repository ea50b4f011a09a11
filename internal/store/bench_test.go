package store_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// BenchmarkTaskLifecycle is the store's cost of a one-step task against a
// real embedded etcd (fsync off, in-process client): create, claim and
// complete, three guarded transactions, from parallel goroutines.
func BenchmarkTaskLifecycle(b *testing.B) { taskLifecycle(b, 1) }

// BenchmarkTaskLifecycleBatched is BenchmarkTaskLifecycle with 64
// goroutines per core, so that writes share transactions as in a saturated
// scheduler (the contract command keeps 128 tasks in flight): the cost per
// task of the operations themselves rather than of transactions. Read
// cpu-ns/op (process CPU, etcd included), which a loaded machine moves
// less than ns/op.
func BenchmarkTaskLifecycleBatched(b *testing.B) { taskLifecycle(b, 64) }

func taskLifecycle(b *testing.B, parallelism int) {
	perTask(b, parallelism, func(s *store.Store, id string) {
		if _, _, err := s.CreateTask(context.Background(), record(id)); err != nil {
			b.Fatal(err)
		}
		if _, _, err := s.UpdateTask(context.Background(), "default", id, func(t *reevev1.Task) error {
			return taskstate.Claim(t, "a", 1, "s1", "agent", t0)
		}); err != nil {
			b.Fatal(err)
		}
		completeStep(b, s, id)
	})
}

// perTask runs task, on a fresh store over a real embedded etcd, once per
// benchmark iteration with a new task id, from parallelism goroutines per
// core, and reports allocations and process CPU per task.
func perTask(b *testing.B, parallelism int, task func(s *store.Store, id string)) {
	s := store.New(etcdtest.New(b).InProcessClient())
	b.SetParallelism(parallelism)
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	defer func() { reportCPU(b, cpu0) }()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			task(s, fmt.Sprintf("b%09d", n.Add(1)))
		}
	})
}

// completeStep records the success of step "a", attempt 1, of task id.
func completeStep(b *testing.B, s *store.Store, id string) {
	ref := &reevev1.StepRef{Namespace: "default", TaskId: id, Step: "a", Attempt: 1}
	if _, _, err := s.UpdateTask(context.Background(), "default", id, func(t *reevev1.Task) error {
		return taskstate.Complete(t, ref, "agent", nil, t0)
	}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkOneStepTask is the store's and etcd's share of a one-step task
// as the scheduler writes it today: the task created with its step already
// claimed (claim on submit), then completed, two guarded writes, from 64
// goroutines per core so that writes share transactions as in the contract
// command. cpu-ns/op is process CPU per task (etcd, fsync off, and the
// store; no gRPC, scheduler, agent or load generator): the floor under
// `reeve bench`'s CPU per task (docs/benchmarks.md, "Issue 15, fifth pass").
//
//	go test -run '^$' -bench BenchmarkOneStepTask -benchtime 30000x ./internal/store/
func BenchmarkOneStepTask(b *testing.B) {
	wf := &reevev1.Workflow{Name: "bench", Version: 1, Steps: []*reevev1.StepSpec{{Name: "a", Type: "t", Timeout: durationpb.New(time.Minute)}}}
	perTask(b, 64, func(s *store.Store, id string) {
		t := taskstate.New("default", id, wf, nil, t0)
		if err := taskstate.Claim(t, "a", 1, "s1", "agent", t0); err != nil {
			b.Fatal(err)
		}
		if _, _, err := s.CreateTask(context.Background(), &storev1.TaskRecord{Task: t, RequestDigest: []byte(id)}); err != nil {
			b.Fatal(err)
		}
		completeStep(b, s, id)
	})
}

// BenchmarkPacedCreates submits task creations open loop at 3,000 per
// second (the writes of 1,000 one-step tasks/s), each from its own
// goroutine, with the commit window off and at its default, and reports
// etcd transactions per write and the median and p99 write latency.
//
//	go test -run '^$' -bench BenchmarkPacedCreates -benchtime 6000x ./internal/store/
func BenchmarkPacedCreates(b *testing.B) {
	e := etcdtest.New(b)
	for _, w := range []time.Duration{0, time.Millisecond} {
		b.Run(fmt.Sprintf("window=%v", w), func(b *testing.B) {
			s := store.New(e.Client(), store.WithCommitWindow(w))
			ctx := context.Background()
			lat := make([]time.Duration, b.N)
			var wg sync.WaitGroup
			before := s.WriteStats()
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				if d := time.Until(start.Add(time.Duration(i) * time.Second / 3000)); d > 0 {
					time.Sleep(d) // pacing an open loop, not waiting for a condition
				}
				wg.Go(func() {
					began := time.Now()
					if _, _, err := s.CreateTask(ctx, record(fmt.Sprintf("p%v-%d-%09d", w, start.UnixNano(), i))); err != nil {
						b.Error(err)
					}
					lat[i] = time.Since(began)
				})
			}
			wg.Wait()
			b.StopTimer()
			after := s.WriteStats()
			slices.Sort(lat)
			b.ReportMetric(float64(after.Txns-before.Txns)/float64(b.N), "txns/write")
			b.ReportMetric(float64(lat[b.N/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[b.N*99/100].Microseconds()), "p99-µs")
		})
	}
}
