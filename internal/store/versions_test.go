package store_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/testenv"
)

// An etcd without a layout version gets this Reeve's, written once; one
// that holds it is used as it is; a newer one, or a value that is no
// version, is refused with an error that names both versions.
func TestCheckLayout(t *testing.T) {
	c := etcdtest.New(t).Client()
	s := store.New(c)
	if err := s.CheckLayout(ctx(t)); err != nil {
		t.Fatalf("empty etcd: %v", err)
	}
	got, err := c.Get(ctx(t), "/reeve/meta/layout-version")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "1" {
		t.Fatalf("layout version after the first check: %v, %v; want \"1\"", got.Kvs, err)
	}
	written := got.Kvs[0].ModRevision
	if err := store.New(c).AwaitLayout(ctx(t)); err != nil {
		t.Fatalf("second process: %v", err)
	}
	if got, _ := c.Get(ctx(t), "/reeve/meta/layout-version"); got.Kvs[0].ModRevision != written {
		t.Fatal("the layout version was written again")
	}

	cases := []struct {
		name, value string
		want        []string
	}{
		{"newer", "99", []string{"etcd layout version 99", "newer than this Reeve knows (1)", "--prefix"}},
		{"not a number", "two", []string{`"two"`, "not a version number"}},
	}
	for _, tc := range cases {
		if _, err := c.Put(ctx(t), "/other/meta/layout-version", tc.value); err != nil {
			t.Fatal(err)
		}
		for _, check := range []func(context.Context) error{store.New(c, store.WithPrefix("/other/")).CheckLayout, store.New(c, store.WithPrefix("/other/")).AwaitLayout} {
			err := check(ctx(t))
			if !errors.Is(err, store.ErrLayoutTooNew) {
				t.Fatalf("%s: %v, want ErrLayoutTooNew", tc.name, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q does not say %q", tc.name, err, w)
				}
			}
		}
		if got, _ := c.Get(ctx(t), "/other/meta/layout-version"); string(got.Kvs[0].Value) != tc.value {
			t.Errorf("%s: the refused layout version was rewritten to %q", tc.name, got.Kvs[0].Value)
		}
	}
}

// versionedStore is a store whose unknown-version counter is read by
// unknownCount.
func versionedStore(t *testing.T, opts ...store.Option) (*store.Store, *clientv3.Client, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	c := etcdtest.New(t).Client()
	return store.New(c, append([]store.Option{store.WithMeterProvider(meterOf(reader, t))}, opts...)...), c, reader
}

// meterOf returns a meter provider that reader collects (a reader serves
// one provider).
func meterOf(reader *sdkmetric.ManualReader, t *testing.T) *sdkmetric.MeterProvider {
	t.Helper()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp
}

// unknownCount returns reeve.records.unknown_version of one kind.
func unknownCount(t *testing.T, reader *sdkmetric.ManualReader, kind string) int64 {
	t.Helper()
	return testenv.CounterSum(t, reader, "reeve.records.unknown_version", func(a attribute.Set) bool {
		v, _ := a.Value("reeve.record.kind")
		return v.AsString() == kind
	})
}

// makeVersion2 rewrites the value of key as a newer Reeve would write it:
// the same record with record_version 2. A task record is decoded first (it
// may be compressed); other values get the field appended, which is how
// the public messages stored as they are carry it. It returns the bytes
// stored.
func makeVersion2(t *testing.T, c *clientv3.Client, key string) []byte {
	t.Helper()
	got, err := c.Get(ctx(t), key)
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("get %s: %v, %v", key, got, err)
	}
	val := got.Kvs[0].Value
	if strings.Contains(key, "/tasks/") {
		rec := &storev1.TaskRecord{}
		if err := store.UnmarshalRecord(val, rec); err != nil {
			t.Fatal(err)
		}
		rec.RecordVersion = 2
		if val, err = proto.Marshal(rec); err != nil {
			t.Fatal(err)
		}
	} else {
		val = protowire.AppendVarint(protowire.AppendTag(bytes.Clone(val), 1000, protowire.VarintType), 2)
	}
	if v, err := store.VersionOf(val); err != nil || v != 2 {
		t.Fatalf("VersionOf the rewritten %s: %d, %v; want 2", key, v, err)
	}
	if _, err := c.Put(ctx(t), key, string(val)); err != nil {
		t.Fatal(err)
	}
	return val
}

// unchanged fails unless key still holds want.
func unchanged(t *testing.T, c *clientv3.Client, key string, want []byte) {
	t.Helper()
	got, err := c.Get(ctx(t), key)
	if err != nil || len(got.Kvs) != 1 || !bytes.Equal(got.Kvs[0].Value, want) {
		t.Fatalf("%s was changed (or removed): %v, %v", key, got.Kvs, err)
	}
}

// An update of a task record of a newer version is refused with
// ErrUnknownVersion naming both versions, leaves the record's bytes as
// they are, and is counted; a read still shows the task. Both record
// formats (plain, compressed).
func TestUpdateLeavesARecordOfAnUnknownVersion(t *testing.T) {
	for _, compressed := range []bool{false, true} {
		s, c, reader := versionedStore(t, store.WithRecordCompression(compressed))
		if _, _, err := s.CreateTask(ctx(t), record("t1")); err != nil {
			t.Fatal(err)
		}
		want := makeVersion2(t, c, "/reeve/tasks/default/t1")
		for _, try := range []string{"first", "again"} { // the second from the record cache, if anything
			_, _, err := s.UpdateTask(ctx(t), "default", "t1", func(task *reevev1.Task) error {
				return taskstate.Cancel(task, "", "test", false, t0)
			})
			var uv *store.UnknownVersionError
			if !errors.Is(err, store.ErrUnknownVersion) || !errors.As(err, &uv) || uv.Version != 2 || uv.Kind != store.KindTask || uv.Name != "t1" {
				t.Fatalf("compressed=%v, %s update: %v, want an UnknownVersionError of version 2", compressed, try, err)
			}
			if !strings.Contains(err.Error(), "version 2") || !strings.Contains(err.Error(), "(1)") {
				t.Errorf("error %q does not name both versions", err)
			}
		}
		unchanged(t, c, "/reeve/tasks/default/t1", want)
		if n := unknownCount(t, reader, store.KindTask); n != 2 {
			t.Errorf("compressed=%v: counted %d, want 2", compressed, n)
		}
		if v, err := s.GetTask(ctx(t), "default", "t1"); err != nil || v.Record.GetTask().GetState() != reevev1.TaskState_TASK_STATE_PENDING {
			t.Errorf("compressed=%v: read of the newer record: %v, %v", compressed, v.Record, err)
		}
	}
}

// The retention sweep neither deletes nor hands to the archive a task of a
// newer version, and counts it; other tasks go as usual.
func TestSweepLeavesARecordOfAnUnknownVersion(t *testing.T) {
	s, c, reader := versionedStore(t)
	for _, id := range []string{"old", "newer"} {
		if _, _, err := s.CreateTask(ctx(t), record(id)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.UpdateTask(ctx(t), "default", id, func(task *reevev1.Task) error {
			return taskstate.Cancel(task, "", "test", false, t0)
		}); err != nil {
			t.Fatal(err)
		}
	}
	want := makeVersion2(t, c, "/reeve/tasks/default/newer")
	var kept []string
	n, _, _, err := s.SweepEnded(ctx(t), store.Sweep{Before: t0.Add(time.Minute), Limit: 100, Keep: func(_ context.Context, recs []*storev1.TaskRecord) error {
		for _, r := range recs {
			kept = append(kept, r.GetTask().GetId())
		}
		return nil
	}})
	if err != nil || n != 1 || len(kept) != 1 || kept[0] != "old" {
		t.Fatalf("swept %d, kept %v (%v); want only the old task", n, kept, err)
	}
	unchanged(t, c, "/reeve/tasks/default/newer", want)
	if got := keys(t, c, "ended/"); len(got) != 1 || !strings.HasSuffix(got[0], "/newer") {
		t.Errorf("ended keys %v, want the newer task's", got)
	}
	if n := unknownCount(t, reader, store.KindTask); n != 1 {
		t.Errorf("counted %d, want 1", n)
	}
}

// The supervisor's read of expired records returns no record of a newer
// version and prunes none of its deadline keys.
func TestExpiredRecordsLeaveARecordOfAnUnknownVersion(t *testing.T) {
	s, c, reader := versionedStore(t)
	if _, _, err := s.CreateTask(ctx(t), record("t1")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.UpdateTask(ctx(t), "default", "t1", func(task *reevev1.Task) error {
		return taskstate.Claim(task, "a", 1, "s", "agent", t0)
	}); err != nil {
		t.Fatal(err)
	}
	want := makeVersion2(t, c, "/reeve/tasks/default/t1")
	ds, err := s.ExpiredAfter(ctx(t), "", t0.Add(time.Hour), 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("expired %v, %v; want the claimed step's deadline", ds, err)
	}
	recs, pruned, err := s.ExpiredRecords(ctx(t), ds, clientv3.Cmp{})
	if err != nil || pruned != 0 || recs[0] != nil {
		t.Fatalf("expired records %v, pruned %d, %v; want none returned, none pruned", recs, pruned, err)
	}
	unchanged(t, c, "/reeve/tasks/default/t1", want)
	if got := keys(t, c, "deadlines/"); len(got) != 1 {
		t.Errorf("deadline keys %v, want the one kept", got)
	}
	if n := unknownCount(t, reader, store.KindTask); n != 1 {
		t.Errorf("counted %d, want 1", n)
	}
}

// The created-index backfill writes no keys for a record of a newer
// version (which keys it implies is that Reeve's to say) and still
// finishes.
func TestBackfillSkipsARecordOfAnUnknownVersion(t *testing.T) {
	s, c, reader := versionedStore(t)
	for _, id := range []string{"t1", "newer"} {
		if _, _, err := s.CreateTask(ctx(t), record(id)); err != nil {
			t.Fatal(err)
		}
	}
	makeVersion2(t, c, "/reeve/tasks/default/newer")
	for _, p := range []string{"created-state/", "meta/created-index"} {
		if _, err := c.Delete(ctx(t), "/reeve/"+p, clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
	}
	if visited, err := s.BackfillCreatedIndexes(ctx(t)); err != nil || visited != 2 {
		t.Fatalf("backfill visited %d, %v; want 2", visited, err)
	}
	if got := keys(t, c, "created-state/"); len(got) != 1 || !strings.HasSuffix(got[0], "/t1") {
		t.Fatalf("created keys %v, want only t1's", got)
	}
	if got := keys(t, c, "meta/created-index"); len(got) != 1 {
		t.Errorf("the backfill did not finish: %v", got)
	}
	if n := unknownCount(t, reader, store.KindTask); n != 1 {
		t.Errorf("counted %d, want 1", n)
	}
}

// A ready entry of a newer version is not offered for dispatch: the watch
// reports its key as gone from the queue.
func TestWatchReadyDropsAnEntryOfAnUnknownVersion(t *testing.T) {
	s, c, reader := versionedStore(t)
	if _, _, err := s.CreateTask(ctx(t), record("t1")); err != nil {
		t.Fatal(err)
	}
	next, _ := watchReady(t, s)
	if ev := next(); !ev.Reset {
		t.Fatalf("first event %v, want a reset", ev)
	}
	if ev := next(); ev.Entry.GetTaskId() != "t1" {
		t.Fatalf("listed %v, want t1", ev.Entry)
	}
	makeVersion2(t, c, "/reeve/ready/default/t1/a")
	if ev := next(); ev.Key != "default/t1/a" || ev.Entry != nil {
		t.Fatalf("after the entry became version 2: %+v, want its key with no entry", ev)
	}
	if n := unknownCount(t, reader, store.KindReadyEntry); n != 1 {
		t.Errorf("counted %d, want 1", n)
	}
}

// A workflow version a newer Reeve registered is shown but not submitted
// (older versions still are); an alert of a newer version is shown but not
// acknowledged.
func TestWorkflowAndAlertOfAnUnknownVersion(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := meterOf(reader, t)
	c := etcdtest.New(t).Client()
	s := store.New(c, store.WithMeterProvider(mp))
	fp := func(w *reevev1.Workflow) []byte { b, _ := proto.Marshal(w); return b }
	w1 := &reevev1.Workflow{Namespace: "default", Name: "wf", Steps: record("x").GetTask().GetWorkflow().GetSteps()}
	if _, _, err := s.PutWorkflow(ctx(t), w1, fp); err != nil {
		t.Fatal(err)
	}
	// What a newer Reeve registers next, in record version 2.
	w2 := proto.Clone(w1).(*reevev1.Workflow)
	w2.Version = 2
	b, err := proto.Marshal(w2)
	if err != nil {
		t.Fatal(err)
	}
	want := protowire.AppendVarint(protowire.AppendTag(b, 1000, protowire.VarintType), 2)
	wkey := "/reeve/workflows/default/wf/0000000002"
	if _, err := c.Put(ctx(t), wkey, string(want)); err != nil {
		t.Fatal(err)
	}
	// A store whose workflow cache has not seen version 1 (this one's
	// submissions find version 2 when CreateTaskOfLatest refuses the
	// cached one: LatestWorkflowForSubmit).
	fresh := store.New(c, store.WithMeterProvider(mp))
	for _, version := range []int32{0, 2} {
		if _, _, err := fresh.WorkflowForSubmit(ctx(t), "default", "wf", version); !errors.Is(err, store.ErrUnknownVersion) {
			t.Errorf("submit of version %d: %v, want ErrUnknownVersion", version, err)
		}
	}
	if _, err := s.LatestWorkflowForSubmit(ctx(t), "default", "wf"); !errors.Is(err, store.ErrUnknownVersion) {
		t.Errorf("submit of the latest, read afresh: %v, want ErrUnknownVersion", err)
	}
	if w, _, err := fresh.WorkflowForSubmit(ctx(t), "default", "wf", 1); err != nil || w.GetVersion() != 1 {
		t.Errorf("submit of version 1: %v, %v", w, err)
	}
	if w, err := s.GetWorkflow(ctx(t), "default", "wf", 0); err != nil || w.GetVersion() != 2 {
		t.Errorf("read of the newer workflow: %v, %v", w, err)
	}
	unchanged(t, c, wkey, want)
	if n := unknownCount(t, reader, store.KindWorkflow); n != 3 {
		t.Errorf("workflows counted %d, want 3", n)
	}

	if _, _, err := s.CreateTask(ctx(t), record("t1")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.UpdateTask(ctx(t), "default", "t1", func(task *reevev1.Task) error {
		return taskstate.FailTask(task, "", "test", t0)
	}); err != nil {
		t.Fatal(err)
	}
	alerts := keys(t, c, "alerts/default/")
	if len(alerts) != 1 {
		t.Fatalf("alerts %v, want one", alerts)
	}
	want = makeVersion2(t, c, alerts[0])
	id := strings.TrimPrefix(alerts[0], "/reeve/alerts/default/")
	if _, err := s.AckAlert(ctx(t), "default", id, "operator", t0); !errors.Is(err, store.ErrUnknownVersion) {
		t.Errorf("ack: %v, want ErrUnknownVersion", err)
	}
	if got, _, err := s.ListAlerts(ctx(t), "default", false, "", 10); err != nil || len(got) != 1 {
		t.Errorf("list of the newer alert: %v, %v", got, err)
	}
	unchanged(t, c, alerts[0], want)
	if n := unknownCount(t, reader, store.KindAlert); n != 1 {
		t.Errorf("alerts counted %d, want 1", n)
	}
}

// What a client registers cannot set the version of what is stored: a
// record_version among a workflow's unknown fields is dropped.
func TestPutWorkflowDropsAVersionField(t *testing.T) {
	s, c := newStore(t)
	w := &reevev1.Workflow{Namespace: "default", Name: "wf", Steps: record("x").GetTask().GetWorkflow().GetSteps()}
	w.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 1000, protowire.VarintType), 7))
	if _, _, err := s.PutWorkflow(ctx(t), w, func(w *reevev1.Workflow) []byte { return []byte(w.GetName()) }); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx(t), "/reeve/workflows/default/wf/0000000001")
	if err != nil || len(got.Kvs) != 1 {
		t.Fatal(got, err)
	}
	if v, err := store.VersionOf(got.Kvs[0].Value); err != nil || v != 1 {
		t.Fatalf("stored version %d, %v; want 1", v, err)
	}
	if _, _, err := s.WorkflowForSubmit(ctx(t), "default", "wf", 0); err != nil {
		t.Fatalf("submit: %v", err)
	}
}
