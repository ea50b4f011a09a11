package store_test

import (
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
)

// A store written before issue 15 has a states/ index next to the created
// ones, and one written before its sixth pass has the created/ and
// created-wf/ indexes of every task whatever its state. Counts do not read
// states/ (a task counted twice, or a stale key left by a mixed-version
// upgrade, would skew admission's active count), listings do not read the
// other two, and a scheduler's start deletes all three, a page at a time,
// leaving every other key alone.
func TestDropLegacyIndexes(t *testing.T) {
	s, c := newStore(t)
	const n = 30
	for i := range n {
		if _, _, err := s.CreateTask(ctx(t), recordAt(i, "wf", reevev1.TaskState_TASK_STATE_PENDING)); err != nil {
			t.Fatal(err)
		}
	}
	// What the older layout wrote: one key per task in its state, and here
	// also stale keys in another state (an older scheduler's key that a
	// newer one did not move) and more keys than one page deletes.
	const legacy = 1100
	for start := 0; start < legacy; start += 100 {
		var puts []clientv3.Op
		for i := start; i < start+100; i++ {
			st := "TASK_STATE_RUNNING"
			if i < n {
				st = "TASK_STATE_PENDING"
			}
			puts = append(puts, clientv3.OpPut(fmt.Sprintf("/reeve/states/default/%s/task-%06d", st, i), ""))
		}
		if _, err := c.Txn(ctx(t)).Then(puts...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Put(ctx(t), "/reeve/statesman", "x"); err != nil { // shares "states" but not "states/"
		t.Fatal(err)
	}
	// The created/ and created-wf/ keys of the tasks, and more than a page
	// of created/ keys of tasks swept by an older sweeper.
	const oldCreated = 1100
	for start := 0; start < oldCreated; start += 100 {
		var puts []clientv3.Op
		for i := start; i < start+100; i++ {
			puts = append(puts, clientv3.OpPut(fmt.Sprintf("/reeve/created/default/%020d/task-%06d", i, i), ""))
		}
		if _, err := c.Txn(ctx(t)).Then(puts...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if _, err := c.Put(ctx(t), fmt.Sprintf("/reeve/created-wf/default/wf/%020d/task-%06d", i, i), ""); err != nil {
			t.Fatal(err)
		}
	}
	if page, err := s.QueryTasks(ctx(t), store.TaskQuery{Namespace: "default", Limit: 2 * oldCreated}); err != nil || len(page.Tasks) != n {
		t.Fatalf("list before the drop: %d tasks, %v; want %d (the legacy keys are not read)", len(page.Tasks), err, n)
	}
	for _, st := range []reevev1.TaskState{reevev1.TaskState_TASK_STATE_PENDING, reevev1.TaskState_TASK_STATE_RUNNING} {
		want := int64(0)
		if st == reevev1.TaskState_TASK_STATE_PENDING {
			want = n
		}
		if got, err := s.CountTasks(ctx(t), "default", st); err != nil || got != want {
			t.Fatalf("count %v: %d, %v; want %d (from the created-state index)", st, got, err, want)
		}
	}
	if got, err := s.CountActive(ctx(t), "default"); err != nil || got != n {
		t.Fatalf("active: %d, %v; want %d", got, err, n)
	}
	deleted, err := s.DropLegacyIndexes(ctx(t))
	if want := int64(legacy + oldCreated + n); err != nil || deleted != want {
		t.Fatalf("dropped %d keys, %v; want %d", deleted, err, want)
	}
	for _, p := range []string{"states/", "created/", "created-wf/"} {
		if left := keys(t, c, p); len(left) != 0 {
			t.Fatalf("%d legacy keys left under %s: %v", len(left), p, left[:min(len(left), 5)])
		}
	}
	if got := len(keys(t, c, "created")); got != 2*n {
		t.Fatalf("%d created keys after the drop, want %d (created-state and created-wf-state untouched)", got, 2*n)
	}
	if got := keys(t, c, "statesman"); len(got) != 1 {
		t.Fatalf("a key outside the index was deleted: %v", got)
	}
	if deleted, err := s.DropLegacyIndexes(ctx(t)); err != nil || deleted != 0 {
		t.Fatalf("second drop: %d, %v; want 0", deleted, err)
	}
}
