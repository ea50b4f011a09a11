package store_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Concurrent writes share transactions, and each keeps its own outcome: a
// failed fence refuses only its own write, a refused transition only its own,
// and every other write of the batch lands with its indexes.
func TestGroupCommitKeepsEachWritesCompareAndFence(t *testing.T) {
	s, c := newStore(t)
	const n = 200
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { _, _, errs[i] = s.CreateTask(ctx(t), record(fmt.Sprintf("t%03d", i))) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create t%03d: %v", i, err)
		}
	}
	if _, err := c.Put(ctx(t), "/fence", "x"); err != nil {
		t.Fatal(err)
	}
	stale := clientv3.Compare(clientv3.ModRevision("/fence"), "=", 1)
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("t%03d", i)
			var fences []clientv3.Cmp
			if i%10 == 3 {
				fences = append(fences, stale)
			}
			_, _, errs[i] = s.UpdateTask(ctx(t), "default", id, func(task *reevev1.Task) error {
				if i%10 == 5 {
					return taskstate.ErrNotQueued
				}
				return taskstate.Claim(task, "a", 1, "s1", "agent", t0)
			}, fences...)
		})
	}
	wg.Wait()
	claimed := 0
	for i, err := range errs {
		switch {
		case i%10 == 3 && !errors.Is(err, store.ErrFenced):
			t.Errorf("t%03d with a failed fence: %v, want ErrFenced", i, err)
		case i%10 == 5 && !errors.Is(err, taskstate.ErrNotQueued):
			t.Errorf("t%03d with a refused transition: %v", i, err)
		case i%10 != 3 && i%10 != 5 && err != nil:
			t.Errorf("t%03d: %v", i, err)
		case err == nil:
			claimed++
		}
	}
	if got := len(keys(t, c, "deadlines/")); got != claimed || claimed != n*8/10 {
		t.Fatalf("%d deadline keys for %d claims, want %d", got, claimed, n*8/10)
	}
	if got := len(keys(t, c, "ready/")); got != n-claimed {
		t.Fatalf("%d ready keys, want %d", got, n-claimed)
	}
	st := s.WriteStats()
	if st.Txns >= st.TaskWrites {
		t.Fatalf("%d transactions for %d task writes: nothing was batched", st.Txns, st.TaskWrites)
	}
	t.Logf("%d task writes in %d etcd transactions", st.TaskWrites, st.Txns)
}

// Many concurrent updates of one task are all applied, one after the other
// (a batch holds one write per task).
func TestGroupCommitSerializesWritesOfOneTask(t *testing.T) {
	s, _ := newStore(t)
	if _, _, err := s.CreateTask(ctx(t), record("t1")); err != nil {
		t.Fatal(err)
	}
	const n = 50
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, _, err := s.UpdateTask(ctx(t), "default", "t1", func(task *reevev1.Task) error {
				task.Reason += "x"
				return nil
			}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	v, err := s.GetTask(ctx(t), "default", "t1")
	if err != nil {
		t.Fatal(err)
	}
	if got := len(v.Record.GetTask().GetReason()); got != n {
		t.Fatalf("%d of %d updates applied", got, n)
	}
}

// The record cache never makes a scheduler act on a stale record: after
// another scheduler claimed the step, a claim through this one is judged on
// the fresh record (refused), and an update still applies on top of the
// other scheduler's write.
func TestStaleCachedRecordIsReadAgain(t *testing.T) {
	s1, c := newStore(t)
	s2 := store.New(c)
	if _, _, err := s1.CreateTask(ctx(t), record("t1")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s2.UpdateTask(ctx(t), "default", "t1", func(task *reevev1.Task) error {
		return taskstate.Claim(task, "a", 1, "s2", "agent-2", t0)
	}); err != nil {
		t.Fatal(err)
	}
	// s1 still caches the record it created, with step a queued.
	_, _, err := s1.UpdateTask(ctx(t), "default", "t1", func(task *reevev1.Task) error {
		return taskstate.Claim(task, "a", 1, "s1", "agent-1", t0)
	})
	if !errors.Is(err, taskstate.ErrNotQueued) {
		t.Fatalf("second claim through a stale cache: %v, want ErrNotQueued", err)
	}
	ref := &reevev1.StepRef{Namespace: "default", TaskId: "t1", Step: "a", Attempt: 1}
	_, after, err := s1.UpdateTask(ctx(t), "default", "t1", func(task *reevev1.Task) error {
		return taskstate.Complete(task, ref, "agent-2", nil, t0)
	})
	if err != nil {
		t.Fatalf("complete through the other store: %v", err)
	}
	if st := taskstate.FindStep(after.GetTask(), "a"); st.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED {
		t.Fatalf("step a after completion: %v", st)
	}
}

// A record too big to share a transaction is committed alone, and the
// writes batched around it are not affected.
func TestGroupCommitLargeRecordAlone(t *testing.T) {
	s, c := newStore(t)
	big := record("big")
	big.Task.Reason = strings.Repeat("r", 700<<10)
	var wg sync.WaitGroup
	errs := make([]error, 21)
	wg.Go(func() { _, _, errs[20] = s.CreateTask(ctx(t), big) })
	for i := range 20 {
		wg.Go(func() { _, _, errs[i] = s.CreateTask(ctx(t), record(fmt.Sprintf("s%02d", i))) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	if got := len(keys(t, c, "tasks/")); got != 21 {
		t.Fatalf("%d tasks stored, want 21", got)
	}
}

// The sweep deletes in batches; every swept task leaves no key behind.
func TestSweepEndedInBatches(t *testing.T) {
	s, c := newStore(t)
	const n = 150 // more than two sweep transactions
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("t%03d", i)
			if _, _, err := s.CreateTask(ctx(t), record(id)); err != nil {
				t.Error(err)
				return
			}
			if _, _, err := s.UpdateTask(ctx(t), "default", id, func(task *reevev1.Task) error {
				return taskstate.Cancel(task, "", "test", false, t0)
			}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if _, _, err := s.CreateTask(ctx(t), record("live")); err != nil {
		t.Fatal(err)
	}
	got, _, _, err := s.SweepEndedFrom(ctx(t), "", t0.Add(time.Minute), 500)
	if err != nil || got != n {
		t.Fatalf("swept %d (%v), want %d", got, err, n)
	}
	for _, prefix := range []string{"tasks/", "created-state/", "ended/"} {
		if left := keys(t, c, prefix); len(left) != 1 && prefix != "ended/" || prefix == "ended/" && len(left) != 0 {
			t.Errorf("%s keys left: %v", prefix, left)
		}
	}
}

// While too many writes wait, new tasks are refused at once (ErrOverloaded)
// and nothing is written for them; updates of existing tasks still queue,
// and everything queued completes.
func TestOverloadRefusesNewTasksOnly(t *testing.T) {
	_, c := newStore(t)
	s := store.New(c, store.WithGroupCommit(1, 1), store.WithMaxQueuedWrites(3))
	for _, id := range []string{"old1", "old2"} {
		if _, _, err := s.CreateTask(ctx(t), record(id)); err != nil {
			t.Fatal(err)
		}
	}
	// Hold the only committer inside a transition.
	entered, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, _, err := s.UpdateTask(ctx(t), "default", "old1", func(task *reevev1.Task) error {
			close(entered)
			<-release
			task.Reason = "held"
			return nil
		}); err != nil {
			t.Error(err)
		}
	})
	<-entered
	queued := make([]error, 3)
	for i := range 3 {
		wg.Go(func() { _, _, queued[i] = s.CreateTask(ctx(t), record(fmt.Sprintf("q%d", i))) })
	}
	// Once the three creations are queued, a fourth is refused.
	for deadline := time.Now().Add(10 * time.Second); s.WriteStats().Queued < 3 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if _, _, err := s.CreateTask(ctx(t), record("refused")); !errors.Is(err, store.ErrOverloaded) {
		close(release)
		wg.Wait()
		t.Fatalf("create with a full queue: %v, want ErrOverloaded", err)
	}
	wg.Go(func() {
		if _, _, err := s.UpdateTask(ctx(t), "default", "old2", func(task *reevev1.Task) error { task.Reason = "queued"; return nil }); err != nil {
			t.Errorf("update with a full queue: %v, want it queued and applied", err)
		}
	})
	close(release)
	wg.Wait()
	for i, err := range queued {
		if err != nil {
			t.Errorf("queued create q%d: %v", i, err)
		}
	}
	if _, err := s.GetTask(ctx(t), "default", "refused"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused task: %v, want not written", err)
	}
}

// Queued updates of existing tasks are committed before queued new tasks.
func TestUpdatesGoBeforeNewTasks(t *testing.T) {
	_, c := newStore(t)
	s := store.New(c, store.WithGroupCommit(1, 1))
	for _, id := range []string{"old1", "old2"} {
		if _, _, err := s.CreateTask(ctx(t), record(id)); err != nil {
			t.Fatal(err)
		}
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, _, err := s.UpdateTask(ctx(t), "default", "old1", func(task *reevev1.Task) error {
			close(entered)
			<-release
			return nil
		}); err != nil {
			t.Error(err)
		}
	})
	<-entered
	for i := range 3 {
		wg.Go(func() {
			if _, _, err := s.CreateTask(ctx(t), record(fmt.Sprintf("new%d", i))); err != nil {
				t.Error(err)
			}
		})
	}
	for deadline := time.Now().Add(10 * time.Second); s.WriteStats().Queued < 3 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	wg.Go(func() {
		if _, _, err := s.UpdateTask(ctx(t), "default", "old2", func(task *reevev1.Task) error { task.Reason = "late update"; return nil }); err != nil {
			t.Error(err)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); s.WriteStats().Queued < 4 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	resp, err := c.Get(ctx(t), "/reeve/tasks/default/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	rev := map[string]int64{}
	for _, kv := range resp.Kvs {
		rev[strings.TrimPrefix(string(kv.Key), "/reeve/tasks/default/")] = kv.ModRevision
	}
	for i := range 3 {
		if n := fmt.Sprintf("new%d", i); rev[n] < rev["old2"] {
			t.Errorf("%s committed at revision %d, before the queued update of old2 (%d)", n, rev[n], rev["old2"])
		}
	}
}
