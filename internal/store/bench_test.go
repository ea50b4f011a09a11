package store_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// BenchmarkTaskLifecycle is the store's cost of a one-step task against a
// real embedded etcd (fsync off, in-process client): create, claim and
// complete, three guarded transactions, from parallel goroutines.
func BenchmarkTaskLifecycle(b *testing.B) {
	s := store.New(etcdtest.New(b).InProcessClient())
	ctx := context.Background()
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprintf("b%09d", n.Add(1))
			if _, _, err := s.CreateTask(ctx, record(id)); err != nil {
				b.Fatal(err)
			}
			if _, _, err := s.UpdateTask(ctx, "default", id, func(t *reevev1.Task) error {
				return taskstate.Claim(t, "a", 1, "s1", "agent", t0)
			}); err != nil {
				b.Fatal(err)
			}
			ref := &reevev1.StepRef{Namespace: "default", TaskId: id, Step: "a", Attempt: 1}
			if _, _, err := s.UpdateTask(ctx, "default", id, func(t *reevev1.Task) error {
				return taskstate.Complete(t, ref, "agent", nil, t0)
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
