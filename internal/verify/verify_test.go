package verify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/archive"
	"github.com/reeve-org/reeve/internal/etcdtest"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/verify"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func record(id string) *storev1.TaskRecord {
	// Named, and with a heartbeat timeout on a: its tasks have
	// created-wf-state keys, and beating keys while a is dispatched.
	wf := &reevev1.Workflow{Name: "wf", DefaultScheduleToStartTimeout: durationpb.New(time.Hour), Steps: []*reevev1.StepSpec{
		{Name: "a", Type: "t", Timeout: durationpb.New(time.Minute), HeartbeatTimeout: durationpb.New(10 * time.Second)},
		{Name: "b", Type: "t", Timeout: durationpb.New(time.Minute)},
		{Name: "c", Type: "t", DependsOn: []string{"a", "b"}},
	}}
	return &storev1.TaskRecord{Task: taskstate.New("default", id, wf, nil, t0), RequestDigest: []byte(id)}
}

// healthy writes tasks in every phase through the store: queued, running,
// succeeded, canceled, failed.
func healthy(t *testing.T, s *store.Store) {
	t.Helper()
	for i := range 12 {
		id := fmt.Sprintf("ok-%02d", i)
		if _, _, err := s.CreateTask(ctx(t), record(id)); err != nil {
			t.Fatal(err)
		}
		update := func(fn func(*reevev1.Task) error) {
			t.Helper()
			if _, _, err := s.UpdateTask(ctx(t), "default", id, fn); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
		}
		switch i % 4 {
		case 1:
			update(func(task *reevev1.Task) error { return taskstate.Claim(task, "a", 1, "s1", "ag", t0) })
		case 2:
			for _, st := range []string{"a", "b", "c"} {
				update(func(task *reevev1.Task) error { return taskstate.Claim(task, st, 1, "s1", "ag", t0) })
				update(func(task *reevev1.Task) error {
					return taskstate.Complete(task, taskstate.Ref(task, taskstate.FindStep(task, st)), "ag", nil, t0)
				})
			}
		case 3:
			update(func(task *reevev1.Task) error { return taskstate.Cancel(task, "", "test", false, t0) })
		}
	}
}

func check(t *testing.T, c *clientv3.Client) *verify.Report {
	t.Helper()
	rep, err := verify.Check(ctx(t), c, verify.Options{PageSize: 3}) // small pages: the scan pages
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestCleanStoreHasNoViolations(t *testing.T) {
	c := etcdtest.New(t).Client()
	healthy(t, store.New(c))
	rep := check(t, c)
	if !rep.OK() || rep.Tasks != 12 || rep.IndexKeys == 0 {
		var b bytes.Buffer
		_ = rep.WriteText(&b)
		t.Fatalf("clean store: %s", b.String())
	}
}

// Each kind of violation, built on a real store, is reported with its key
// and task.
func TestEveryViolationIsReported(t *testing.T) {
	c := etcdtest.New(t).Client()
	s := store.New(c)
	healthy(t, s)
	put := func(k, v string) {
		t.Helper()
		if _, err := c.Put(ctx(t), k, v); err != nil {
			t.Fatal(err)
		}
	}
	// An orphan ready key and an orphan deadline of a task that never existed.
	put("/reeve/ready/default/ghost/a", "")
	put(fmt.Sprintf("/reeve/deadlines/%020d/default/ghost/a/1", t0.UnixNano()), "")
	// A deadline of another attempt of a live task.
	put(fmt.Sprintf("/reeve/deadlines/%020d/default/ok-01/a/7", t0.UnixNano()), "")
	// An orphan created-state key (counts by state read that index).
	put("/reeve/created-state/default/TASK_STATE_RUNNING/09223372035000000000/ghost2", "")
	// A state key of the layout before issue 15, left by an older
	// scheduler, and a created-state key in a state the task is not in.
	put("/reeve/states/default/TASK_STATE_PENDING/ok-02", "")
	put("/reeve/created-state/default/TASK_STATE_RUNNING/09223372035000000000/ok-03", "")
	// A key of a listing index of the layout before issue 15's sixth pass,
	// an orphan created-wf-state key, and a beating key of a step that is
	// not dispatched any more.
	put("/reeve/created/default/09223372035000000000/ok-04", "")
	put("/reeve/created-wf-state/default/wf/TASK_STATE_RUNNING/09223372035000000000/ghost3", "")
	put("/reeve/beating/default/ag/ok-06/a/1", "")
	// A ready key of a queued step removed.
	if _, err := c.Delete(ctx(t), "/reeve/ready/default/ok-00/a"); err != nil {
		t.Fatal(err)
	}
	// A terminal task whose steps are still queued, with their keys.
	term := record("term")
	term.Task.State = reevev1.TaskState_TASK_STATE_COMPENSATED
	term.Task.EndTime = timestamppb.New(t0)
	// A running task nothing will move: no step queued or dispatched.
	stuck := record("stuck")
	for _, st := range stuck.Task.Steps {
		st.ReadyTime, st.ScheduleToStartDeadline = nil, nil
	}
	for _, r := range []*storev1.TaskRecord{term, stuck} {
		if _, _, err := s.CreateTask(ctx(t), r); err != nil {
			t.Fatal(err)
		}
	}
	rep := check(t, c)
	want := []struct{ kind, task, key string }{
		{verify.KindOrphan, "ghost", "/reeve/ready/default/ghost/a"},
		{verify.KindOrphan, "ghost", "/reeve/deadlines/"},
		{verify.KindMismatch, "ok-01", "/a/7"},
		{verify.KindMissing, "ok-00", "/reeve/ready/default/ok-00/a"},
		{verify.KindOrphan, "ghost2", "/reeve/created-state/"},
		{verify.KindMismatch, "ok-02", "/reeve/states/default/TASK_STATE_PENDING/ok-02"},
		{verify.KindMismatch, "ok-03", "/reeve/created-state/default/TASK_STATE_RUNNING/"},
		{verify.KindMismatch, "ok-04", "/reeve/created/default/"},
		{verify.KindOrphan, "ghost3", "/reeve/created-wf-state/"},
		{verify.KindMismatch, "ok-06", "/reeve/beating/default/ag/ok-06/a/1"},
		{verify.KindTerminalLive, "term", "/reeve/tasks/default/term"},
		{verify.KindWedged, "stuck", "/reeve/tasks/default/stuck"},
	}
	for _, w := range want {
		found := false
		for _, v := range rep.Violations {
			if v.Kind == w.kind && v.TaskID == w.task && strings.Contains(v.Key, w.key) {
				found = true
			}
		}
		if !found {
			t.Errorf("no %s violation for task %s (key ~%s)", w.kind, w.task, w.key)
		}
	}
	for _, v := range rep.Violations {
		if strings.HasPrefix(v.TaskID, "ok-") && !slices.Contains([]string{"ok-00", "ok-01", "ok-02", "ok-03", "ok-04", "ok-06"}, v.TaskID) {
			t.Errorf("healthy task reported: %+v", v)
		}
	}
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Violations []verify.Violation `json:"violations"`
	}
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back.Violations) != len(rep.Violations) {
		t.Fatalf("JSON report: %v, %d violations, want %d", err, len(back.Violations), len(rep.Violations))
	}
	if t.Failed() {
		b.Reset()
		_ = rep.WriteText(&b)
		t.Log(b.String())
	}
}

// With an archive: ended tasks still in etcd long past their move are
// reported (a FAILED one by the retention, the others by the grace), and
// expected tasks found neither in etcd nor in the archive are lost.
func TestArchiveViolations(t *testing.T) {
	c := etcdtest.New(t).Client()
	s := store.New(c)
	healthy(t, s) // ok-03, ok-07, ok-11 canceled at t0; ok-02, ok-06, ok-10 succeeded at t0
	a, err := archive.Open(ctx(t), "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	// ok-99 moved to the archive; gone-1 is in neither.
	if err := a.Put(ctx(t), []archive.Task{{Namespace: "default", ID: "ok-99", State: reevev1.TaskState_TASK_STATE_SUCCEEDED, CreateTime: t0, EndTime: t0}}); err != nil {
		t.Fatal(err)
	}
	opts := verify.Options{Tasks: taskread.New(s, a), ArchiveGrace: time.Minute, Retention: time.Hour, Slack: time.Minute,
		Expect: []verify.TaskRef{{"default", "ok-00"}, {"default", "ok-99"}, {"default", "gone-1"}}}

	opts.Now = func() time.Time { return t0.Add(90 * time.Second) } // within grace + slack
	rep, err := verify.Check(ctx(t), c, opts)
	if err != nil {
		t.Fatal(err)
	}
	if kinds := kindsOf(rep); !slices.Equal(kinds, []string{verify.KindLost + " gone-1"}) {
		t.Fatalf("within the grace: %v; want only the lost task", kinds)
	}
	opts.Now = func() time.Time { return t0.Add(3 * time.Minute) }
	rep, err = verify.Check(ctx(t), c, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{verify.KindLost + " gone-1"}
	for _, id := range []string{"ok-02", "ok-03", "ok-06", "ok-07", "ok-10", "ok-11"} {
		want = append(want, verify.KindNotArchived+" "+id)
	}
	slices.Sort(want)
	if kinds := kindsOf(rep); !slices.Equal(kinds, want) {
		t.Fatalf("past the grace: %v; want %v", kinds, want)
	}
}

func kindsOf(rep *verify.Report) []string {
	var kinds []string
	for _, v := range rep.Violations {
		kinds = append(kinds, v.Kind+" "+v.TaskID)
	}
	slices.Sort(kinds)
	return kinds
}
