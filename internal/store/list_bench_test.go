package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
	"github.com/reeve-org/reeve/internal/store"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// BenchmarkQueryTasks100k lists tasks from a store of 100,000 tasks (ten
// workflows, 1% FAILED, the rest SUCCEEDED, created one per millisecond over
// the 100 s before the benchmark) against a real embedded etcd
// (in-process client), through the created indexes, in the basic view and
// pages of 100 as the console asks:
//
//	go test -run '^$' -bench QueryTasks100k -benchmem -benchtime 200x ./internal/store/
func BenchmarkQueryTasks100k(b *testing.B) {
	const n = 100_000
	s := store.New(etcdtest.New(b, etcdtest.WithQuotaBytes(4<<30)).InProcessClient())
	ctx := context.Background()
	start := time.Now()
	base := start.Add(-n * time.Millisecond)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 64 {
				st := reevev1.TaskState_TASK_STATE_SUCCEEDED
				if i%100 == 0 {
					st = reevev1.TaskState_TASK_STATE_FAILED
				}
				rec := recordAt(i, fmt.Sprintf("wf-%d", i%10), st)
				rec.Task.CreateTime = timestamppb.New(base.Add(time.Duration(i) * time.Millisecond))
				if _, _, err := s.CreateTask(ctx, rec); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.Logf("stored %d tasks in %v", n, time.Since(start).Round(time.Second))
	trim := func(t *reevev1.Task) { t.Input, t.History = nil, nil }
	deep := &store.ListPosition{Created: base.Add(10_000 * time.Millisecond), ID: "task-010000"}
	for _, bc := range []struct {
		name string
		q    store.TaskQuery
		want int
	}{
		{"first-page", store.TaskQuery{}, 100},
		{"state-failed", store.TaskQuery{State: reevev1.TaskState_TASK_STATE_FAILED}, 100},
		{"workflow", store.TaskQuery{Workflow: "wf-3"}, 100},
		{"workflow-and-state", store.TaskQuery{Workflow: "wf-0", State: reevev1.TaskState_TASK_STATE_FAILED}, 100},
		{"created-range", store.TaskQuery{CreatedAfter: base.Add(50 * time.Second), CreatedBefore: base.Add(60 * time.Second)}, 100},
		{"deep-page-90k", store.TaskQuery{After: deep}, 100},
		{"id-prefix-newest", store.TaskQuery{IDPrefix: "task-0999"}, 100},
		{"id-prefix-oldest-scan-budget", store.TaskQuery{IDPrefix: "task-0000"}, 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			q := bc.q
			q.Namespace, q.Limit, q.Basic, q.Trim = "default", 100, true, trim
			b.ReportAllocs()
			for b.Loop() {
				page, err := s.QueryTasks(ctx, q)
				if err != nil {
					b.Fatal(err)
				}
				if len(page.Tasks) != bc.want {
					b.Fatalf("%d tasks, want %d", len(page.Tasks), bc.want)
				}
			}
		})
	}
}
