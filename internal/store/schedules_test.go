package store_test

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/testenv"
)

func sched(name string, fire time.Time) *reevev1.Schedule {
	return &reevev1.Schedule{Namespace: "default", Name: name, Spec: &reevev1.ScheduleSpec{Cron: "* * * * *"},
		Info: &reevev1.ScheduleInfo{NextFireTime: timestamppb.New(fire)}}
}

// The due index holds exactly the schedules to fire, moved with every
// write of their records; a fenced write of a deposed leader changes
// nothing.
func TestScheduleDueIndexFollowsTheRecords(t *testing.T) {
	s, c := newStore(t)
	ctx := ctx(t)
	for i, name := range []string{"a", "b", "c"} {
		if err := s.CreateSchedule(ctx, sched(name, t0.Add(time.Duration(i)*time.Minute))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateSchedule(ctx, sched("a", t0)); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("second create: %v, want ErrAlreadyExists", err)
	}
	due := func(at time.Time) []string {
		ds, err := s.DueSchedules(ctx, "", at, 100)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, d := range ds {
			names = append(names, d.Name)
		}
		return names
	}
	if got := due(t0.Add(time.Minute)); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("due at +1m: %v, want [a b]", got)
	}
	page, err := s.DueSchedules(ctx, "", t0.Add(time.Hour), 1)
	if err != nil || len(page) != 1 || page[0].Name != "a" {
		t.Fatalf("first page %v %v, want [a]", page, err)
	}
	if page, err = s.DueSchedules(ctx, page[0].Key, t0.Add(time.Hour), 5); err != nil || len(page) != 2 || page[0].Name != "b" {
		t.Fatalf("page after a: %v %v, want [b c]", page, err)
	}
	// a moves 10 minutes on; c is paused (no due key).
	if _, err := s.UpdateSchedule(ctx, "default", "a", clientv3.Cmp{}, func(sc *reevev1.Schedule) error {
		sc.Info.NextFireTime = timestamppb.New(t0.Add(10 * time.Minute))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateSchedule(ctx, "default", "c", clientv3.Cmp{}, func(sc *reevev1.Schedule) error {
		sc.Paused = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := due(t0.Add(5 * time.Minute)); len(got) != 1 || got[0] != "b" {
		t.Fatalf("due at +5m: %v, want [b]", got)
	}
	if at, ok, _, err := s.NextScheduleDue(ctx); err != nil || !ok || !at.Equal(t0.Add(time.Minute)) {
		t.Fatalf("next due %v %v %v, want b's", at, ok, err)
	}

	// A leader's fence: its write goes through while it holds the
	// election, and is refused once its session is gone.
	sess, err := concurrency.NewSession(c)
	if err != nil {
		t.Fatal(err)
	}
	el := concurrency.NewElection(sess, s.ElectionPrefix())
	if err := el.Campaign(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	fence := store.FenceCmp(el.Key(), el.Rev())
	if _, err := s.UpdateSchedule(ctx, "default", "b", fence, func(sc *reevev1.Schedule) error {
		sc.Info.RunCount = 1
		return nil
	}); err != nil {
		t.Fatalf("fenced write of the leader: %v", err)
	}
	_ = sess.Close()
	if _, err := s.UpdateSchedule(ctx, "default", "b", fence, func(sc *reevev1.Schedule) error {
		sc.Info.RunCount = 2
		return nil
	}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("write of a deposed leader: %v, want ErrFenced", err)
	}
	if got, _, _ := s.GetSchedule(ctx, "default", "b"); got.GetInfo().GetRunCount() != 1 {
		t.Fatalf("run count %d after the deposed write, want 1", got.GetInfo().GetRunCount())
	}

	for _, name := range []string{"a", "b", "c"} {
		if _, err := s.DeleteSchedule(ctx, "default", name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DeleteSchedule(ctx, "default", "a"); !store.IsNotFound(err) {
		t.Fatalf("delete twice: %v, want not found", err)
	}
	if keys := testenv.DataKeys(t, c); len(keys) != 0 {
		t.Fatalf("keys left after deleting every schedule: %v", keys)
	}
}

func TestListSchedulesPages(t *testing.T) {
	s, _ := newStore(t)
	ctx := ctx(t)
	for _, name := range []string{"c", "a", "b"} {
		if err := s.CreateSchedule(ctx, sched(name, t0)); err != nil {
			t.Fatal(err)
		}
	}
	first, more, err := s.ListSchedules(ctx, "default", "", 2)
	if err != nil || !more || len(first) != 2 || first[0].GetName() != "a" || first[1].GetName() != "b" {
		t.Fatalf("first page %v more=%v err=%v", first, more, err)
	}
	rest, more, err := s.ListSchedules(ctx, "default", "b", 2)
	if err != nil || more || len(rest) != 1 || rest[0].GetName() != "c" {
		t.Fatalf("second page %v more=%v err=%v", rest, more, err)
	}
}

// GetSchedules reads many at once; an update from a record that changed
// since it was read reads it again instead of overwriting the change.
func TestGetSchedulesAndUpdateFromAStaleRead(t *testing.T) {
	s, _ := newStore(t)
	ctx := ctx(t)
	for _, name := range []string{"a", "b"} {
		if err := s.CreateSchedule(ctx, sched(name, t0)); err != nil {
			t.Fatal(err)
		}
	}
	recs, revs, err := s.GetSchedules(ctx, []store.ScheduleRef{{Namespace: "default", Name: "a"}, {Namespace: "default", Name: "ghost"}, {Namespace: "default", Name: "b"}})
	if err != nil || recs[0].GetName() != "a" || recs[1] != nil || revs[1] != 0 || recs[2].GetName() != "b" {
		t.Fatalf("get schedules: %v %v %v", recs, revs, err)
	}
	if _, err := s.UpdateSchedule(ctx, "default", "a", clientv3.Cmp{}, func(sc *reevev1.Schedule) error { sc.Note = "changed"; return nil }); err != nil {
		t.Fatal(err)
	}
	calls := 0
	got, err := s.UpdateScheduleFrom(ctx, "default", "a", recs[0], revs[0], clientv3.Cmp{}, func(sc *reevev1.Schedule) error {
		calls++
		sc.Info.RunCount++
		return nil
	})
	if err != nil || calls != 2 || got.GetNote() != "changed" || got.GetInfo().GetRunCount() != 1 {
		t.Fatalf("update from a stale read: %d calls, note %q, runs %d, %v; want 2 calls keeping the change", calls, got.GetNote(), got.GetInfo().GetRunCount(), err)
	}
}

// A schedule written by a newer Reeve (record_version 2) is not rewritten;
// a version a client sets on a new schedule is not stored.
func TestScheduleOfANewerReeveIsNotRewritten(t *testing.T) {
	s, c := newStore(t)
	ctx := ctx(t)
	withVersion := func(v uint64) *reevev1.Schedule {
		sc := sched("a", t0)
		sc.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 1000, protowire.VarintType), v))
		return sc
	}
	if err := s.CreateSchedule(ctx, withVersion(2)); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctx, "/reeve/schedules/default/a")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := store.VersionOf(resp.Kvs[0].Value); v != 1 {
		t.Fatalf("a client's version was stored: %d", v)
	}
	val, _ := proto.Marshal(withVersion(2))
	if _, err := c.Put(ctx, "/reeve/schedules/default/a", string(val)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateSchedule(ctx, "default", "a", clientv3.Cmp{}, func(sc *reevev1.Schedule) error { sc.Note = "x"; return nil }); !errors.Is(err, store.ErrUnknownVersion) {
		t.Fatalf("update of a newer Reeve's schedule: %v, want ErrUnknownVersion", err)
	}
}
