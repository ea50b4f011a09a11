package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
)

// batchSchedules creates n schedules due at t and returns them as read,
// with their revisions.
func batchSchedules(t *testing.T, ctx context.Context, s *Store, n int, at time.Time) ([]ScheduleRef, []*reevev1.Schedule, []int64) {
	t.Helper()
	refs := make([]ScheduleRef, n)
	for i := range refs {
		refs[i] = ScheduleRef{Namespace: "default", Name: fmt.Sprintf("s%d", i)}
		if err := s.CreateSchedule(ctx, &reevev1.Schedule{Namespace: "default", Name: refs[i].Name, Spec: &reevev1.ScheduleSpec{Cron: "* * * * *"},
			Info: &reevev1.ScheduleInfo{NextFireTime: timestamppb.New(at)}}); err != nil {
			t.Fatal(err)
		}
	}
	recs, revs, err := s.GetSchedules(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	return refs, recs, revs
}

// fired is the write a firing makes of cur: one run more, the due key
// moved a minute on.
func fired(t *testing.T, s *Store, cur *reevev1.Schedule, rev int64, fence clientv3.Cmp) *scheduleWrite {
	t.Helper()
	next := proto.Clone(cur).(*reevev1.Schedule)
	next.Info.RunCount++
	next.Info.NextFireTime = timestamppb.New(cur.GetInfo().GetNextFireTime().AsTime().Add(time.Minute))
	val, err := marshal(next)
	if err != nil {
		t.Fatal(err)
	}
	key := s.k.schedule(cur.GetNamespace(), cur.GetName())
	ops := []clientv3.Op{clientv3.OpPut(key, val), clientv3.OpDelete(s.k.dueKeyOf(cur)), clientv3.OpPut(s.k.dueKeyOf(next), "")}
	return &scheduleWrite{ctx: context.Background(), key: key, rev: rev, fence: fence, ops: ops, size: opsSize(ops), done: make(chan scheduleWriteRes, 1)}
}

// One batch of schedule writes under a leader's fence: each write keeps
// its own compare, so the one whose record changed since it was read is
// not written (and is told so, to read again) while the others are; once
// the leader is deposed, a batch of its writes writes nothing, and each is
// told it was fenced.
func TestScheduleBatchKeepsEachCompareAndTheFence(t *testing.T) {
	c := etcdtest.New(t).Client()
	s := New(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	refs, recs, revs := batchSchedules(t, ctx, s, 5, t0)

	// s2 changes after it was read (an admin's pause note).
	if _, err := s.UpdateSchedule(ctx, "default", "s2", clientv3.Cmp{}, func(sc *reevev1.Schedule) error { sc.Note = "changed"; return nil }); err != nil {
		t.Fatal(err)
	}
	sess, err := concurrency.NewSession(c)
	if err != nil {
		t.Fatal(err)
	}
	el := concurrency.NewElection(sess, s.k.election())
	if err := el.Campaign(ctx, "leader"); err != nil {
		t.Fatal(err)
	}
	fence := FenceCmp(el.Key(), el.Rev())

	batch := make([]*scheduleWrite, len(refs))
	for i := range refs {
		batch[i] = fired(t, s, recs[i], revs[i], fence)
	}
	before := s.scheduleTxns.Load()
	s.commitSchedules(batch)
	if got := s.scheduleTxns.Load() - before; got != 1 {
		t.Fatalf("%d batched transactions, want 1", got)
	}
	for i, w := range batch {
		res := <-w.done
		want := scheduleWriteRes{ok: i != 2}
		if res != want {
			t.Errorf("%s: %+v, want %+v", refs[i].Name, res, want)
		}
	}
	now, nowRevs, err := s.GetSchedules(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	for i, sc := range now {
		wantRuns := int64(1)
		if i == 2 {
			wantRuns = 0
			if sc.GetNote() != "changed" {
				t.Errorf("s2's change was overwritten: %v", sc)
			}
		}
		if sc.GetInfo().GetRunCount() != wantRuns {
			t.Errorf("%s: %d runs, want %d", refs[i].Name, sc.GetInfo().GetRunCount(), wantRuns)
		}
	}
	// The due index moved with the written records only.
	due, err := s.DueSchedules(ctx, "", t0, 100)
	if err != nil || len(due) != 1 || due[0].Name != "s2" {
		t.Fatalf("due at t0 after the batch: %v %v, want [s2]", due, err)
	}

	// The leader is deposed (its election key gone while it still runs):
	// a batch of its writes, from the current records, writes nothing.
	if _, err := c.Delete(ctx, el.Key()); err != nil {
		t.Fatal(err)
	}
	for i := range refs {
		batch[i] = fired(t, s, now[i], nowRevs[i], fence)
	}
	s.commitSchedules(batch)
	for i, w := range batch {
		if res := <-w.done; res != (scheduleWriteRes{fenced: true}) {
			t.Errorf("%s after the deposal: %+v, want fenced", refs[i].Name, res)
		}
	}
	after, afterRevs, err := s.GetSchedules(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range after {
		if afterRevs[i] != nowRevs[i] || !proto.Equal(after[i], now[i]) {
			t.Errorf("%s was written by a deposed leader", refs[i].Name)
		}
	}
	_ = sess.Close()
}

// Many concurrent fenced updates of schedule records (as a FireSchedules
// call makes them), some of whose records change under them, each apply
// exactly once: the committer's batches keep every write's compare, and a
// write that lost its compare is read again and repeated.
func TestConcurrentScheduleUpdatesApplyOnce(t *testing.T) {
	c := etcdtest.New(t).Client()
	s := New(c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 200
	refs, recs, revs := batchSchedules(t, ctx, s, n, t0)
	sess, err := concurrency.NewSession(c)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	el := concurrency.NewElection(sess, s.k.election())
	if err := el.Campaign(ctx, "leader"); err != nil {
		t.Fatal(err)
	}
	fence := FenceCmp(el.Key(), el.Rev())
	// Every fifth record changes after it was read.
	for i := 0; i < n; i += 5 {
		if _, err := s.UpdateSchedule(ctx, "default", refs[i].Name, clientv3.Cmp{}, func(sc *reevev1.Schedule) error { sc.Note = "changed"; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range refs {
		wg.Go(func() {
			if _, err := s.UpdateScheduleFrom(ctx, "default", refs[i].Name, recs[i], revs[i], fence, func(sc *reevev1.Schedule) error {
				sc.Info.RunCount++
				sc.Info.NextFireTime = timestamppb.New(t0.Add(time.Minute))
				return nil
			}); err != nil {
				t.Errorf("%s: %v", refs[i].Name, err)
			}
		})
	}
	wg.Wait()
	got, _, err := s.GetSchedules(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	for i, sc := range got {
		if sc.GetInfo().GetRunCount() != 1 || (i%5 == 0) != (sc.GetNote() == "changed") {
			t.Errorf("%s: %d runs, note %q; want 1 run and the change kept", refs[i].Name, sc.GetInfo().GetRunCount(), sc.GetNote())
		}
	}
	if due, err := s.DueSchedules(ctx, "", t0.Add(time.Minute), 1000); err != nil || len(due) != n {
		t.Fatalf("%d due keys, %v; want %d (one per schedule)", len(due), err, n)
	}
	if due, err := s.DueSchedules(ctx, "", t0, 1000); err != nil || len(due) != 0 {
		t.Fatalf("%d due keys left at the old time, %v", len(due), err)
	}
}
