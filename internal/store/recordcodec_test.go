package store_test

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
)

// storedRecord returns the raw value of a task key as etcd holds it.
func storedRecord(t *testing.T, c *clientv3.Client, id string) []byte {
	t.Helper()
	resp, err := c.Get(ctx(t), "/reeve/tasks/default/"+id)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v (%d keys)", id, err, len(resp.Kvs))
	}
	return resp.Kvs[0].Value
}

// During an upgrade, schedulers that compress records and schedulers that
// do not share one etcd: each reads and updates what the other wrote, in
// every read path (a get, an update, a listing in the full and the basic
// view), and a store writes its own format whatever the record was before.
func TestCompressedAndPlainRecordsMix(t *testing.T) {
	c := etcdtest.New(t).Client()
	plain, packed := store.New(c), store.New(c, store.WithRecordCompression(true))
	if _, _, err := plain.CreateTask(ctx(t), record("p")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := packed.CreateTask(ctx(t), record("z")); err != nil {
		t.Fatal(err)
	}
	isPacked := func(id string) bool { return storedRecord(t, c, id)[0] == 0x00 }
	if isPacked("p") || !isPacked("z") {
		t.Fatalf("p compressed %v, z compressed %v; want only z", isPacked("p"), isPacked("z"))
	}
	if n, m := len(storedRecord(t, c, "z")), len(storedRecord(t, c, "p")); n >= m {
		t.Fatalf("compressed record %d bytes, plain %d", n, m)
	}

	// Each store updates the other's record, and writes its own format.
	for _, u := range []struct {
		s      *store.Store
		id     string
		packed bool
	}{{packed, "p", true}, {plain, "z", false}} {
		if _, after, err := u.s.UpdateTask(ctx(t), "default", u.id, func(t *reevev1.Task) error {
			t.Reason = "updated by the other store"
			return nil
		}); err != nil || after.GetTask().GetReason() == "" {
			t.Fatalf("update %s: %v", u.id, err)
		}
		if isPacked(u.id) != u.packed {
			t.Fatalf("after the update %s is compressed: %v, want %v", u.id, isPacked(u.id), u.packed)
		}
	}
	for _, s := range []*store.Store{plain, packed} {
		for _, id := range []string{"p", "z"} {
			v, err := s.GetTask(ctx(t), "default", id)
			if err != nil || v.Record.GetTask().GetReason() != "updated by the other store" {
				t.Fatalf("get %s: %v, reason %q", id, err, v.Record.GetTask().GetReason())
			}
		}
		for _, basic := range []bool{false, true} {
			page, err := s.QueryTasks(ctx(t), store.TaskQuery{Namespace: "default", Limit: 10, Basic: basic})
			if err != nil || len(page.Tasks) != 2 {
				t.Fatalf("list (basic %v): %d tasks, %v; want both", basic, len(page.Tasks), err)
			}
			for _, task := range page.Tasks {
				if len(task.GetSteps()) != 2 || (!basic && task.GetWorkflow().GetSteps() == nil) {
					t.Fatalf("list (basic %v): task %s decoded without its steps", basic, task.GetId())
				}
			}
		}
	}
	var rec storev1.TaskRecord
	if err := store.UnmarshalRecord(storedRecord(t, c, "p"), &rec); err != nil || rec.GetTask().GetId() != "p" {
		t.Fatalf("UnmarshalRecord of a compressed record: %v", err)
	}
}
