package store_test

import (
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// A store written before issue 15 has a states/ index next to the created
// ones. Counts do not read it (a task counted twice, or a stale key left
// by a mixed-version upgrade, would skew admission's active count), and a
// scheduler's start deletes all of it, a page at a time, leaving every
// other key alone.
func TestDropLegacyStateIndex(t *testing.T) {
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
	created := len(keys(t, c, "created"))
	deleted, err := s.DropLegacyStateIndex(ctx(t))
	if err != nil || deleted != legacy {
		t.Fatalf("dropped %d keys, %v; want %d", deleted, err, legacy)
	}
	if left := keys(t, c, "states/"); len(left) != 0 {
		t.Fatalf("%d legacy keys left: %v", len(left), left[:min(len(left), 5)])
	}
	if got := len(keys(t, c, "created")); got != created || got != 4*n {
		t.Fatalf("%d created keys after the drop, want %d (untouched)", got, 4*n)
	}
	if got := keys(t, c, "statesman"); len(got) != 1 {
		t.Fatalf("a key outside the index was deleted: %v", got)
	}
	if deleted, err := s.DropLegacyStateIndex(ctx(t)); err != nil || deleted != 0 {
		t.Fatalf("second drop: %d, %v; want 0", deleted, err)
	}
}
