package taskread_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/archive"
	"github.com/reeve-org/reeve/internal/etcdtest"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/pgtest"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
	"github.com/reeve-org/reeve/internal/taskstate"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The tasks of every test, newest first: one in each place a task can be
// while a reader looks. "moving" is in both: written to the archive, not yet
// deleted from etcd.
const (
	inEtcd    = "in-etcd"    // live, PENDING
	moving    = "moving"     // SUCCEEDED, in etcd and the archive
	inArchive = "in-archive" // SUCCEEDED, moved
	nowhere   = "nowhere"    // never existed, or lost
)

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// record is a one-step task created at t0 + age ms.
func record(id string, age int, state reevev1.TaskState) *storev1.TaskRecord {
	wf := &reevev1.Workflow{Name: "wf", Steps: []*reevev1.StepSpec{{Name: "a", Type: "t", Timeout: durationpb.New(time.Minute)}}}
	rec := &storev1.TaskRecord{Task: taskstate.New("default", id, wf, nil, t0), RequestDigest: []byte(id)}
	rec.Task.CreateTime = timestamppb.New(t0.Add(time.Duration(age) * time.Millisecond))
	rec.Task.State = state
	if taskstate.TerminalTask(state) {
		rec.Task.EndTime = timestamppb.New(t0.Add(time.Second))
	}
	return rec
}

func archived(t *testing.T, rec *storev1.TaskRecord) archive.Task {
	t.Helper()
	full, err := proto.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := proto.Marshal(rec.GetTask())
	if err != nil {
		t.Fatal(err)
	}
	tk := rec.GetTask()
	return archive.Task{Namespace: tk.GetNamespace(), ID: tk.GetId(), Workflow: tk.GetWorkflow().GetName(), State: tk.GetState(),
		CreateTime: tk.GetCreateTime().AsTime(), EndTime: tk.GetEndTime().AsTime(), Summary: sum, Record: full}
}

// fixture returns a store holding inEtcd and moving and, for a backend,
// an archive holding moving and inArchive (nil for "none").
func fixture(t *testing.T, backend string) (*store.Store, archive.Archive) {
	t.Helper()
	st := store.New(etcdtest.New(t).Client())
	for _, rec := range []*storev1.TaskRecord{record(inEtcd, 3, reevev1.TaskState_TASK_STATE_PENDING), record(moving, 2, reevev1.TaskState_TASK_STATE_SUCCEEDED)} {
		if _, _, err := st.CreateTask(ctx(t), rec); err != nil {
			t.Fatal(err)
		}
	}
	dsn := map[string]string{"none": ""}[backend]
	switch backend {
	case "sqlite":
		dsn = "sqlite:" + filepath.Join(t.TempDir(), "archive.db")
	case "postgres":
		dsn = pgtest.Start(t)
	}
	if dsn == "" {
		return st, nil
	}
	a, err := archive.Open(ctx(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	rows := []archive.Task{archived(t, record(moving, 2, reevev1.TaskState_TASK_STATE_SUCCEEDED)), archived(t, record(inArchive, 1, reevev1.TaskState_TASK_STATE_SUCCEEDED))}
	if err := a.Put(ctx(t), rows); err != nil {
		t.Fatal(err)
	}
	return st, a
}

var backends = []string{"none", "sqlite", "postgres"}

// found reports whether a reader of the backend finds task id.
func found(backend, id string) bool {
	return id == inEtcd || id == moving || (id == inArchive && backend != "none")
}

// Get, Exists and Lost agree on every task, wherever it is: etcd's copy
// first, the archive's when etcd has none, not found (and lost) in neither.
func TestReaderGetExistsLost(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			st, a := fixture(t, backend)
			r := taskread.New(st, a)
			ids := []string{inEtcd, moving, inArchive, nowhere}
			var wantLost []string
			for _, id := range ids {
				if !found(backend, id) {
					wantLost = append(wantLost, id)
				}
			}
			for _, tc := range []struct {
				id           string
				wantArchived bool
			}{
				{inEtcd, false},
				{moving, false}, // etcd's copy
				{inArchive, true},
				{nowhere, false},
			} {
				want := found(backend, tc.id)
				rec, arch, err := r.Get(ctx(t), "default", tc.id)
				if want != (err == nil) || (!want && !store.IsNotFound(err)) {
					t.Errorf("Get(%s) = %v, want found %v (or the store's not-found error)", tc.id, err, want)
				}
				if want && (rec.GetTask().GetId() != tc.id || arch != tc.wantArchived) {
					t.Errorf("Get(%s) = task %q archived %v, want archived %v", tc.id, rec.GetTask().GetId(), arch, tc.wantArchived)
				}
				if ok, err := r.Exists(ctx(t), "default", tc.id); err != nil || ok != want {
					t.Errorf("Exists(%s) = %v, %v; want %v", tc.id, ok, err, want)
				}
			}
			lost, err := r.Lost(ctx(t), "default", ids)
			if err != nil || !slices.Equal(lost, wantLost) {
				t.Errorf("Lost = %v, %v; want %v", lost, err, wantLost)
			}
		})
	}
}

// Lost looks up any number of tasks, more than one etcd transaction holds.
func TestReaderLostManyTasks(t *testing.T) {
	st, a := fixture(t, "sqlite")
	r := taskread.New(st, a)
	var ids, want []string
	for i := range 250 {
		id := []string{inEtcd, moving, inArchive, nowhere}[i%4]
		ids = append(ids, id)
		if id == nowhere {
			want = append(want, id)
		}
	}
	if lost, err := r.Lost(ctx(t), "default", ids); err != nil || !slices.Equal(lost, want) {
		t.Errorf("Lost = %d ids, %v; want %d", len(lost), err, len(want))
	}
}

// List merges etcd's page with the archive's, newest first, a moving task
// once (etcd's copy), in one page or in pages of one task; Count adds the
// archive's counts (a moving task twice).
func TestReaderListCount(t *testing.T) {
	for _, tc := range []struct {
		backend      string
		wantIDs      []string
		wantArchived []string
		wantDone     int64 // SUCCEEDED
	}{
		{"none", []string{inEtcd, moving}, nil, 1},
		{"sqlite", []string{inEtcd, moving, inArchive}, []string{inArchive}, 3},
		{"postgres", []string{inEtcd, moving, inArchive}, []string{inArchive}, 3},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			st, a := fixture(t, tc.backend)
			r := taskread.New(st, a)
			for _, limit := range []int{1, 10} {
				var ids, arch []string
				q := store.TaskQuery{Namespace: "default", Limit: limit}
				for pages := 0; pages < 10; pages++ {
					page, fromArchive, err := r.List(ctx(t), q, pages%2 == 0)
					if err != nil {
						t.Fatalf("List: %v", err)
					}
					for _, tk := range page.Tasks {
						ids = append(ids, tk.GetId())
					}
					arch = append(arch, fromArchive...)
					if page.Next == nil {
						break
					}
					q.After = page.Next
				}
				if !slices.Equal(ids, tc.wantIDs) || !slices.Equal(arch, tc.wantArchived) {
					t.Errorf("pages of %d: listed %v, archived %v; want %v, %v", limit, ids, arch, tc.wantIDs, tc.wantArchived)
				}
			}
			counts, rev, err := r.Count(ctx(t), "default", "")
			if err != nil || rev == 0 || counts[reevev1.TaskState_TASK_STATE_PENDING] != 1 || counts[reevev1.TaskState_TASK_STATE_SUCCEEDED] != tc.wantDone {
				t.Errorf("Count = %v at %d, %v; want 1 pending, %d succeeded", counts, rev, err, tc.wantDone)
			}
		})
	}
}

// An archive that cannot answer fails the reads that reach it with an
// *ArchiveError, never "not found" or "lost"; reads etcd answers alone
// still succeed.
func TestReaderArchiveUnavailable(t *testing.T) {
	st, a := fixture(t, "sqlite")
	r := taskread.New(st, a)
	_ = a.Close()
	var ae *taskread.ArchiveError
	_, _, err := r.Get(ctx(t), "default", inArchive)
	_, lostErr := r.Lost(ctx(t), "default", []string{inEtcd, nowhere})
	_, existsErr := r.Exists(ctx(t), "default", nowhere)
	_, _, listErr := r.List(ctx(t), store.TaskQuery{Namespace: "default", Limit: 10}, false)
	_, _, countErr := r.Count(ctx(t), "default", "")
	for what, err := range map[string]error{"Get": err, "Lost": lostErr, "Exists": existsErr, "List": listErr, "Count": countErr} {
		if !errors.As(err, &ae) {
			t.Errorf("%s with the archive closed: %v, want an *ArchiveError", what, err)
		}
	}
	if rec, arch, err := r.Get(ctx(t), "default", inEtcd); err != nil || arch || rec.GetTask().GetId() != inEtcd {
		t.Errorf("Get of a live task with the archive closed: %v, %v", arch, err)
	}
	if lost, err := r.Lost(ctx(t), "default", []string{inEtcd, moving}); err != nil || len(lost) != 0 {
		t.Errorf("Lost of tasks etcd holds with the archive closed: %v, %v", lost, err)
	}
}

// Open reads the archive a DSN names, and closes it on Close; "" is none.
func TestReaderOpen(t *testing.T) {
	st, _ := fixture(t, "none")
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "archive.db")
	for _, tc := range []struct {
		dsn         string
		wantArchive bool
	}{{"", false}, {dsn, true}} {
		r, err := taskread.Open(ctx(t), st, tc.dsn)
		if err != nil {
			t.Fatalf("Open(%q): %v", tc.dsn, err)
		}
		if r.HasArchive() != tc.wantArchive {
			t.Errorf("Open(%q).HasArchive() = %v", tc.dsn, r.HasArchive())
		}
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}
