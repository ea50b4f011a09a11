package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newStore(t *testing.T) (*store.Store, *clientv3.Client) {
	t.Helper()
	c := etcdtest.New(t).Client()
	return store.New(c), c
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func record(id string) *storev1.TaskRecord {
	wf := &reevev1.Workflow{Steps: []*reevev1.StepSpec{
		{Name: "a", Type: "t", Timeout: durationpb.New(time.Minute)},
		{Name: "b", Type: "t", DependsOn: []string{"a"}},
	}}
	return &storev1.TaskRecord{Task: taskstate.New("default", id, wf, nil, t0), RequestDigest: []byte(id)}
}

// keys returns the keys under a prefix of the store's layout.
func keys(t *testing.T, c *clientv3.Client, prefix string) []string {
	t.Helper()
	resp, err := c.Get(ctx(t), "/reeve/"+prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

func TestCreateTaskWritesRecordAndIndexesOnce(t *testing.T) {
	s, c := newStore(t)
	if _, created, err := s.CreateTask(ctx(t), record("t1")); err != nil || !created {
		t.Fatalf("create: %v created=%v", err, created)
	}
	if got := keys(t, c, "ready/"); len(got) != 1 || got[0] != "/reeve/ready/default/t1/a" {
		t.Fatalf("ready keys %v, want only step a", got)
	}
	if got := keys(t, c, "created-state/"); len(got) != 1 || !strings.HasPrefix(got[0], "/reeve/created-state/default/TASK_STATE_PENDING/") {
		t.Fatalf("state keys %v", got)
	}
	if got := keys(t, c, "states/"); len(got) != 0 {
		t.Fatalf("keys of the old state index written: %v", got)
	}
	existing, created, err := s.CreateTask(ctx(t), record("t1"))
	if err != nil || created || existing.GetTask().GetId() != "t1" {
		t.Fatalf("second create: %v created=%v, want the existing record", err, created)
	}
}

func TestUpdateTaskMovesIndexesWithTheRecord(t *testing.T) {
	s, c := newStore(t)
	if _, _, err := s.CreateTask(ctx(t), record("t1")); err != nil {
		t.Fatal(err)
	}
	_, after, err := s.UpdateTask(ctx(t), "default", "t1", func(task *reevev1.Task) error {
		return taskstate.Claim(task, "a", 1, "s1", "agent", t0)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(t, c, "ready/"); len(got) != 0 {
		t.Fatalf("ready keys after claim: %v", got)
	}
	deadlines, err := s.ExpiredDeadlines(ctx(t), t0.Add(time.Minute), 10)
	if err != nil || len(deadlines) != 1 || deadlines[0].Step != "a" || deadlines[0].Attempt != 1 || !deadlines[0].CompleteBy.Equal(t0.Add(time.Minute)) {
		t.Fatalf("deadlines %v %v, want a@1 at t0+1m", deadlines, err)
	}
	if early, _ := s.ExpiredDeadlines(ctx(t), t0.Add(59*time.Second), 10); len(early) != 0 {
		t.Fatalf("deadline reported before it passed: %v", early)
	}
	if got := keys(t, c, "created-state/"); len(got) != 1 || !strings.HasPrefix(got[0], "/reeve/created-state/default/TASK_STATE_RUNNING/") {
		t.Fatalf("state keys %v", got)
	}
	ref := taskstate.Ref(after.GetTask(), taskstate.FindStep(after.GetTask(), "a"))
	if _, _, err := s.UpdateTask(ctx(t), "default", "t1", func(task *reevev1.Task) error {
		return taskstate.Complete(task, ref, "agent", nil, t0)
	}); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, c, "deadlines/"); len(got) != 0 {
		t.Fatalf("deadline keys after completion: %v", got)
	}
	if got := keys(t, c, "ready/"); len(got) != 1 || got[0] != "/reeve/ready/default/t1/b" {
		t.Fatalf("ready keys %v, want b", got)
	}
}

func TestUpdateTaskRetriesOnConflictAndHonorsFences(t *testing.T) {
	s, c := newStore(t)
	if _, _, err := s.CreateTask(ctx(t), record("t1")); err != nil {
		t.Fatal(err)
	}
	calls := 0
	other := store.New(c) // another scheduler
	_, _, err := s.UpdateTask(ctx(t), "default", "t1", func(task *reevev1.Task) error {
		calls++
		if calls == 1 {
			// A concurrent writer changes the record between read and commit.
			if _, _, err := other.UpdateTask(ctx(t), "default", "t1", func(task *reevev1.Task) error {
				task.Reason = "other writer"
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		task.History = nil
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("update: %v after %d calls, want success after a retry", err, calls)
	}
	if v, _ := s.GetTask(ctx(t), "default", "t1"); v.Record.GetTask().GetReason() != "other writer" {
		t.Fatal("the retry lost the concurrent writer's change")
	}

	if _, err := c.Put(ctx(t), "/fence", "x"); err != nil {
		t.Fatal(err)
	}
	stale := clientv3.Compare(clientv3.ModRevision("/fence"), "=", 1)
	_, _, err = s.UpdateTask(ctx(t), "default", "t1", func(task *reevev1.Task) error { task.Reason = "fenced"; return nil }, stale)
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("update with a failed fence: %v, want ErrFenced", err)
	}
	if v, _ := s.GetTask(ctx(t), "default", "t1"); v.Record.GetTask().GetReason() == "fenced" {
		t.Fatal("a fenced update was written")
	}
}

func TestWatchReadyListsThenFollows(t *testing.T) {
	s, _ := newStore(t)
	if _, _, err := s.CreateTask(ctx(t), record("t1")); err != nil {
		t.Fatal(err)
	}
	next, stop := watchReady(t, s)
	if ev := next(); !ev.Reset {
		t.Fatalf("first event %v, want a reset", ev)
	}
	if ev := next(); ev.Entry.GetTaskId() != "t1" || ev.Entry.GetStep() != "a" || ev.Entry.GetAttempt() != 1 {
		t.Fatalf("listed %v, want t1/a attempt 1", ev.Entry)
	}
	if _, _, err := s.CreateTask(ctx(t), record("t2")); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Entry.GetTaskId() != "t2" {
		t.Fatalf("followed %v, want t2", ev.Entry)
	}
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("WatchReady returned %v", err)
	}
}

// watchReady runs WatchReady until stop, which returns its error; next
// returns its next event, failing the test after 10 s without one.
func watchReady(t *testing.T, s *store.Store) (next func() store.ReadyEvent, stop func() error) {
	t.Helper()
	events := make(chan store.ReadyEvent, 16)
	wctx, cancel := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	go func() { done <- s.WatchReady(wctx, events) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	next = func() store.ReadyEvent {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no ready event")
			return store.ReadyEvent{}
		}
	}
	return next, stop
}

func TestSweepEndedRemovesOnlyOldTerminalTasks(t *testing.T) {
	s, c := newStore(t)
	for _, id := range []string{"old", "new", "live"} {
		if _, _, err := s.CreateTask(ctx(t), record(id)); err != nil {
			t.Fatal(err)
		}
	}
	end := map[string]time.Time{"old": t0, "new": t0.Add(time.Hour)}
	for id, at := range end {
		if _, _, err := s.UpdateTask(ctx(t), "default", id, func(task *reevev1.Task) error {
			return taskstate.Cancel(task, "", "test", false, at)
		}); err != nil {
			t.Fatal(err)
		}
	}
	n, _, _, err := s.SweepEndedFrom(ctx(t), "", t0.Add(time.Minute), 100)
	if err != nil || n != 1 {
		t.Fatalf("swept %d (%v), want 1", n, err)
	}
	if _, err := s.GetTask(ctx(t), "default", "old"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("old task: %v, want removed", err)
	}
	for _, id := range []string{"new", "live"} {
		if _, err := s.GetTask(ctx(t), "default", id); err != nil {
			t.Fatalf("%s: %v, want kept", id, err)
		}
	}
	if got := keys(t, c, "created-state/default/TASK_STATE_CANCELED/"); len(got) != 1 {
		t.Fatalf("state index %v, want only the new task", got)
	}
}

// An alert lives as long as its task: the sweep that deletes a FAILED task
// after its retention deletes the alerts raised then, and keeps newer ones.
func TestSweepEndedRemovesTheAlertsOfSweptTasks(t *testing.T) {
	s, c := newStore(t)
	end := map[string]time.Time{"old": t0, "new": t0.Add(time.Hour)}
	for id, at := range end {
		if _, _, err := s.CreateTask(ctx(t), record(id)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.UpdateTask(ctx(t), "default", id, func(task *reevev1.Task) error {
			return taskstate.FailTask(task, "", "test", at)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if got := keys(t, c, "alerts/default/"); len(got) != 2 {
		t.Fatalf("alerts %v, want one per failed task", got)
	}
	if n, _, _, err := s.SweepEndedFrom(ctx(t), "", t0.Add(time.Minute), 100); err != nil || n != 1 {
		t.Fatalf("swept %d (%v), want 1", n, err)
	}
	got := keys(t, c, "alerts/default/")
	if len(got) != 1 || !strings.HasSuffix(got[0], "-new") {
		t.Fatalf("alerts after the sweep %v, want only the new task's", got)
	}
}

// A sweeper that calls SweepEndedFrom with the cursor it got back deletes
// every task past retention, each range starting after the keys it already
// examined; a task that ended before the cursor (a scheduler whose clock is
// behind) is found again by a sweep from the start of the index.
func TestSweepEndedFromContinuesAfterItsCursor(t *testing.T) {
	s, c := newStore(t)
	end := func(id string, at time.Time) {
		t.Helper()
		if _, _, err := s.CreateTask(ctx(t), record(id)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.UpdateTask(ctx(t), "default", id, func(task *reevev1.Task) error {
			return taskstate.Cancel(task, "", "test", false, at)
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		end(fmt.Sprintf("t%d", i), t0.Add(time.Duration(i)*time.Second))
	}
	var (
		cursor string
		total  int
		calls  int
	)
	for more := true; more; calls++ {
		if calls == 10 {
			t.Fatal("the sweep does not end")
		}
		n, next, m, err := s.SweepEndedFrom(ctx(t), cursor, t0.Add(time.Minute), 2)
		if err != nil {
			t.Fatal(err)
		}
		if next <= cursor {
			t.Fatalf("cursor %q did not move past %q", next, cursor)
		}
		total, cursor, more = total+n, next, m
	}
	if total != 5 || calls != 3 {
		t.Fatalf("swept %d tasks in %d calls, want 5 in 3", total, calls)
	}
	if got := keys(t, c, "ended/"); len(got) != 0 {
		t.Fatalf("ended keys left: %v", got)
	}
	// Ended before the cursor: passed by from it, found from the start.
	end("late", t0)
	if n, next, more, err := s.SweepEndedFrom(ctx(t), cursor, t0.Add(time.Minute), 2); err != nil || n != 0 || next != cursor || more {
		t.Fatalf("from the cursor: swept %d, next %q, more %v (%v); want nothing, the same cursor", n, next, more, err)
	}
	if n, _, _, err := s.SweepEndedFrom(ctx(t), "", t0.Add(time.Minute), 2); err != nil || n != 1 {
		t.Fatalf("from the start: swept %d (%v), want 1", n, err)
	}
}

// The dispatcher updates a task as soon as the ready-queue watch reports it;
// the update must find the task even if the member's serializable view lags
// the watch (a regression found by reeve bench).
func TestUpdateDrivenByWatchFindsNewTasks(t *testing.T) {
	s := store.New(etcdtest.New(t).InProcessClient())
	events := make(chan store.ReadyEvent, 1024)
	wctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	go func() { _ = s.WatchReady(wctx, events) }()
	const n = 300
	go func() {
		for i := range n {
			if _, _, err := s.CreateTask(wctx, record(fmt.Sprintf("w%03d", i))); err != nil && wctx.Err() == nil {
				t.Errorf("create: %v", err)
			}
		}
	}()
	for claimed := 0; claimed < n; {
		select {
		case ev := <-events:
			if ev.Entry == nil {
				continue
			}
			_, _, err := s.UpdateTask(ctx(t), "default", ev.Entry.GetTaskId(), func(task *reevev1.Task) error {
				return taskstate.Claim(task, "a", 1, "s1", "agent", t0)
			})
			if err != nil {
				t.Fatalf("claim %s right after its ready event: %v", ev.Entry.GetTaskId(), err)
			}
			claimed++
		case <-time.After(20 * time.Second):
			t.Fatalf("only %d of %d ready events", claimed, n)
		}
	}
}

// laggingKV serves serializable reads at an older revision, as an etcd
// member that has not applied the latest writes yet does (or any member in
// the instant between notifying watchers of a write and exposing it).
type laggingKV struct {
	clientv3.KV
	rev int64
}

func (kv laggingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if clientv3.OpGet(key, opts...).IsSerializable() {
		opts = append(opts, clientv3.WithRev(kv.rev))
	}
	return kv.KV.Get(ctx, key, opts...)
}

func (kv laggingKV) Txn(ctx context.Context) clientv3.Txn {
	return laggingTxn{Txn: kv.KV.Txn(ctx), rev: kv.rev}
}

// laggingTxn serves the serializable single-key gets of a read-only
// transaction at the lagging revision.
type laggingTxn struct {
	clientv3.Txn
	rev int64
}

func (t laggingTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	lagged := make([]clientv3.Op, len(ops))
	for i, op := range ops {
		lagged[i] = op
		if op.IsGet() && op.IsSerializable() && len(op.RangeBytes()) == 0 {
			lagged[i] = clientv3.OpGet(string(op.KeyBytes()), clientv3.WithSerializable(), clientv3.WithRev(t.rev))
		}
	}
	return laggingTxn{Txn: t.Txn.Then(lagged...), rev: t.rev}
}

// A claim made on a stale view of the task, from before the write that
// made the step ready, must not be refused: the dispatcher would drop the
// ready entry and the step would stay queued with no one to claim it.
func TestUpdateIsNotRefusedOnAStaleRead(t *testing.T) {
	member := etcdtest.New(t)
	s := store.New(member.Client())
	if _, _, err := s.CreateTask(ctx(t), record("lag")); err != nil {
		t.Fatal(err)
	}
	update := func(s *store.Store, fn func(*reevev1.Task) error) error {
		_, _, err := s.UpdateTask(ctx(t), "default", "lag", fn)
		return err
	}
	claim := func(step string) func(*reevev1.Task) error {
		return func(task *reevev1.Task) error { return taskstate.Claim(task, step, 1, "s1", "agent", t0) }
	}
	if err := update(s, claim("a")); err != nil {
		t.Fatal(err)
	}
	before, err := s.GetTask(ctx(t), "default", "lag")
	if err != nil {
		t.Fatal(err)
	}
	ref := &reevev1.StepRef{Namespace: "default", TaskId: "lag", Step: "a", Attempt: 1}
	if err := update(s, func(task *reevev1.Task) error { return taskstate.Complete(task, ref, "agent", nil, t0) }); err != nil {
		t.Fatal(err)
	}

	lagging := member.Client()
	lagging.KV = laggingKV{KV: lagging.KV, rev: before.Revision}
	if err := update(store.New(lagging), claim("b")); err != nil {
		t.Fatalf("claim of b on a view from before a completed: %v", err)
	}
	// A refusal that holds on the current record is still returned.
	if err := update(store.New(lagging), claim("b")); !errors.Is(err, taskstate.ErrNotQueued) {
		t.Fatalf("second claim of b: %v, want ErrNotQueued", err)
	}
}
