package verify_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/verify"
)

// Records a newer Reeve wrote (record version 2) are listed, each once, as
// record_of_unknown_version: a task record (whose index keys are not
// judged, even where this Reeve would derive others), a ready entry, a
// workflow and an alert. Nothing else is reported.
func TestRecordsOfAnUnknownVersionAreListed(t *testing.T) {
	c := etcdtest.New(t).Client()
	s := store.New(c)
	healthy(t, s)
	// newer: its record in version 2, with a state its keys do not match.
	if _, _, err := s.CreateTask(ctx(t), record("newer")); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx(t), "/reeve/tasks/default/newer")
	if err != nil {
		t.Fatal(err)
	}
	rec := &storev1.TaskRecord{}
	if err := store.UnmarshalRecord(got.Kvs[0].Value, rec); err != nil {
		t.Fatal(err)
	}
	rec.RecordVersion = 2
	rec.Task.State = reevev1.TaskState_TASK_STATE_RUNNING
	put := func(key string, m proto.Message, version2 bool) {
		t.Helper()
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if version2 {
			b = protowire.AppendVarint(protowire.AppendTag(b, 1000, protowire.VarintType), 2)
		}
		if _, err := c.Put(ctx(t), key, string(b)); err != nil {
			t.Fatal(err)
		}
	}
	put("/reeve/tasks/default/newer", rec, false)
	// A ready entry of version 2 of a task of version 1 (ok-00 is queued).
	put("/reeve/ready/default/ok-00/a", &storev1.ReadyEntry{Namespace: "default", TaskId: "ok-00", Step: "a", Type: "t", Attempt: 1}, true)
	put("/reeve/workflows/default/wf/0000000001", &reevev1.Workflow{Namespace: "default", Name: "wf", Version: 1}, true)
	put(fmt.Sprintf("/reeve/alerts/default/%020d-ok-03", t0.UnixNano()), &reevev1.Alert{Namespace: "default", TaskId: "ok-03"}, true)

	rep := check(t, c)
	want := []string{"/reeve/tasks/default/newer", "/reeve/ready/default/ok-00/a", "/reeve/workflows/default/wf/0000000001", "/reeve/alerts/default/"}
	for _, v := range rep.Violations {
		if v.Kind != verify.KindUnknownVersion || !strings.Contains(v.Detail, "version 2") || !strings.Contains(v.Detail, "knows (1)") {
			t.Errorf("unexpected violation %+v", v)
		}
	}
	if len(rep.Violations) != len(want) {
		t.Errorf("%d violations, want %d", len(rep.Violations), len(want))
	}
	for _, w := range want {
		found := false
		for _, v := range rep.Violations {
			found = found || strings.HasPrefix(v.Key, w)
		}
		if !found {
			t.Errorf("no %s for %s", verify.KindUnknownVersion, w)
		}
	}
	if t.Failed() {
		var b bytes.Buffer
		_ = rep.WriteText(&b)
		t.Log(b.String())
	}
}

// A layout a newer Reeve wrote is refused: verify cannot tell a violation
// from a change.
func TestNewerLayoutIsRefused(t *testing.T) {
	c := etcdtest.New(t).Client()
	healthy(t, store.New(c))
	if _, err := c.Put(ctx(t), "/reeve/meta/layout-version", "99"); err != nil {
		t.Fatal(err)
	}
	_, err := verify.Check(ctx(t), c, verify.Options{})
	if !errors.Is(err, store.ErrLayoutTooNew) || !strings.Contains(err.Error(), "version 99") {
		t.Fatalf("check: %v, want a refusal naming version 99", err)
	}
	if _, err := c.Delete(ctx(t), "/reeve/meta/layout-version"); err != nil {
		t.Fatal(err)
	}
	if rep := check(t, c); !rep.OK() {
		t.Fatalf("without a layout version (an older Reeve's etcd): %d violations", len(rep.Violations))
	}
}
