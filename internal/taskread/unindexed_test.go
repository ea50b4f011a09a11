package taskread_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/archive"
	"github.com/reeve-org/reeve/internal/etcdtest"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// With an archive, the tasks that ended without created keys are listed and
// counted as before, the same whichever of the three places they are in:
// in etcd during the grace window (found through the ended index), moving
// (in both), and in the archive. Every list (all states, one state, one
// workflow; pages of 1, 4 and 100 across the etcd/archive boundary) and the
// counts are the same at each stage of the move.
func TestReaderListsUnindexedTasksAcrossTheMove(t *testing.T) {
	st := store.New(etcdtest.New(t).Client(), store.WithEndedUnindexed(true))
	a, err := archive.Open(ctx(t), "sqlite:"+filepath.Join(t.TempDir(), "archive.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	r := taskread.New(st, a)

	states := []reevev1.TaskState{
		reevev1.TaskState_TASK_STATE_SUCCEEDED, reevev1.TaskState_TASK_STATE_CANCELED, reevev1.TaskState_TASK_STATE_FAILED,
		reevev1.TaskState_TASK_STATE_SUCCEEDED, reevev1.TaskState_TASK_STATE_RUNNING,
	}
	for i := range 30 {
		rec := record(fmt.Sprintf("t%02d", i), i, reevev1.TaskState_TASK_STATE_RUNNING)
		rec.Task.Workflow.Name = []string{"wf", "other"}[i%2]
		if _, _, err := st.CreateTask(ctx(t), rec); err != nil {
			t.Fatal(err)
		}
		end := t0.Add(time.Duration(i) * time.Second)
		if _, _, err := st.UpdateTask(ctx(t), "default", rec.GetTask().GetId(), func(task *reevev1.Task) error {
			switch states[i%len(states)] {
			case reevev1.TaskState_TASK_STATE_SUCCEEDED:
				task.GetSteps()[0].State = reevev1.StepState_STEP_STATE_SUCCEEDED
				task.State, task.EndTime = reevev1.TaskState_TASK_STATE_SUCCEEDED, timestamppb.New(end)
			case reevev1.TaskState_TASK_STATE_CANCELED:
				return taskstate.Cancel(task, "", "test", false, end)
			case reevev1.TaskState_TASK_STATE_FAILED:
				return taskstate.FailTask(task, "", "test", end)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	type listing struct {
		ids    []string
		counts map[reevev1.TaskState]int64
	}
	queries := []store.TaskQuery{
		{Namespace: "default"},
		{Namespace: "default", State: reevev1.TaskState_TASK_STATE_SUCCEEDED},
		{Namespace: "default", State: reevev1.TaskState_TASK_STATE_CANCELED},
		{Namespace: "default", State: reevev1.TaskState_TASK_STATE_FAILED},
		{Namespace: "default", Workflow: "wf"},
		{Namespace: "default", Workflow: "other", State: reevev1.TaskState_TASK_STATE_SUCCEEDED},
	}
	look := func(stage string) map[string]listing {
		out := map[string]listing{}
		for _, q := range queries {
			var want []string
			for _, limit := range []int{1, 4, 100} {
				q := q
				q.Limit = limit
				var ids []string
				for pages := 0; ; pages++ {
					if pages > 40 {
						t.Fatalf("%s: query %+v does not end", stage, q)
					}
					page, _, err := r.List(ctx(t), q, pages%2 == 0)
					if err != nil {
						t.Fatalf("%s: List %+v: %v", stage, q, err)
					}
					for _, tk := range page.Tasks {
						ids = append(ids, fmt.Sprintf("%s:%s", tk.GetId(), taskstate.StateName(tk.GetState())))
					}
					if page.Next == nil {
						break
					}
					q.After = page.Next
				}
				if limit == 1 {
					want = ids
				} else if !slices.Equal(ids, want) {
					t.Errorf("%s: query %+v lists %v in pages of %d, %v in pages of 1", stage, q, ids, limit, want)
				}
			}
			counts, _, err := r.Count(ctx(t), "default", q.Workflow)
			if err != nil {
				t.Fatalf("%s: Count: %v", stage, err)
			}
			out[fmt.Sprintf("%s/%s", q.State, q.Workflow)] = listing{want, counts}
		}
		return out
	}
	// move moves the tasks that ended before `before` (FAILED ones too) to
	// the archive, or with keepOnly writes them there and leaves them in
	// etcd (moving).
	move := func(before time.Time, keepOnly bool) {
		keep := func(ctx context.Context, recs []*storev1.TaskRecord) error {
			var rows []archive.Task
			for _, rec := range recs {
				rows = append(rows, archived(t, rec))
			}
			if err := a.Put(ctx, rows); err != nil {
				return err
			}
			if keepOnly {
				return errKeptOnly
			}
			return nil
		}
		if _, _, _, err := st.SweepEnded(ctx(t), store.Sweep{Before: before, Limit: 100, Keep: keep}); err != nil && err != errKeptOnly {
			t.Fatal(err)
		}
	}

	inEtcd := look("in etcd")
	if got := inEtcd["TASK_STATE_UNSPECIFIED/"].ids; len(got) != 30 {
		t.Fatalf("in etcd: listed %d tasks, want 30: %v", len(got), got)
	}
	for _, stage := range []struct {
		name string
		step func()
	}{
		{"some moved", func() { move(t0.Add(10*time.Second), false) }},
		{"some moving", func() { move(t0.Add(20*time.Second), true) }},
		{"every ended one moved", func() { move(t0.Add(time.Hour), false) }},
	} {
		stage.step()
		got := look(stage.name)
		for q, want := range inEtcd {
			if !slices.Equal(got[q].ids, want.ids) {
				t.Errorf("%s: query %s lists\n %v\nwant (in etcd)\n %v", stage.name, q, got[q].ids, want.ids)
			}
			for s, n := range want.counts {
				// A task moving is in both places and counted twice for
				// that moment (Reader.Count); once moved, once.
				if stage.name != "some moving" && got[q].counts[s] != n {
					t.Errorf("%s: workflow %q counts %d %s, want %d", stage.name, q, got[q].counts[s], s, n)
				}
			}
		}
	}
}

var errKeptOnly = fmt.Errorf("kept in the archive only")

// A list that would read more of the ended index than its budget (the
// archive far behind) fails as when the archive cannot answer, never with
// tasks left out; a list of a state that keeps its created keys answers.
func TestReaderEndedBacklogIsAnArchiveError(t *testing.T) {
	st := store.New(etcdtest.New(t).Client(), store.WithEndedUnindexed(true))
	a, err := archive.Open(ctx(t), "sqlite:"+filepath.Join(t.TempDir(), "archive.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	r := taskread.New(st, a)
	for i := range 3 {
		rec := record(fmt.Sprintf("t%d", i), i, reevev1.TaskState_TASK_STATE_RUNNING)
		if _, _, err := st.CreateTask(ctx(t), rec); err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.UpdateTask(ctx(t), "default", rec.GetTask().GetId(), func(task *reevev1.Task) error {
			return taskstate.Cancel(task, "", "test", false, t0.Add(time.Second))
		}); err != nil {
			t.Fatal(err)
		}
	}
	q := store.TaskQuery{Namespace: "default", Limit: 10, MaxEndedScan: 2}
	var ae *taskread.ArchiveError
	if _, _, err := r.List(ctx(t), q, false); !errors.As(err, &ae) || !errors.Is(err, store.ErrEndedBacklog) {
		t.Fatalf("List over the ended budget: %v, want an *ArchiveError (ErrEndedBacklog)", err)
	}
	q.State = reevev1.TaskState_TASK_STATE_RUNNING
	if page, _, err := r.List(ctx(t), q, false); err != nil || len(page.Tasks) != 0 {
		t.Fatalf("List of RUNNING tasks: %d, %v; want none, no error", len(page.Tasks), err)
	}
	q.State, q.MaxEndedScan = 0, 0
	if page, _, err := r.List(ctx(t), q, false); err != nil || len(page.Tasks) != 3 {
		t.Fatalf("List with the default budget: %d, %v; want 3", len(page.Tasks), err)
	}
}
