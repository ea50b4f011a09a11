package scheduler_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// recvChanged receives the next event and fails unless it is a change of
// task id.
func recvChanged(t *testing.T, w reevev1.SchedulerService_WatchTasksClient, id string) *reevev1.TaskChanged {
	t.Helper()
	for range 100 {
		m, err := w.Recv()
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		c := m.GetChanged()
		if c == nil {
			t.Fatalf("watch: got %v, want a change of %s", m, id)
		}
		if c.GetTask().GetId() == id {
			return c
		}
	}
	t.Fatalf("watch: no change of %s in 100 events", id)
	return nil
}

// A namespace-wide watch from a list's revision sees every later change,
// in the basic view unless asked for the full one, and only of its
// namespace.
func TestWatchTasksFromListRevision(t *testing.T) {
	_, _, c := newEnv(t)
	submitMany(t, c, "before", 2, "wf", nil)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	list, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	basic, err := c.WatchTasks(ctx, &reevev1.WatchTasksRequest{StartRevision: list.GetRevision()})
	if err != nil {
		t.Fatal(err)
	}
	full, err := c.WatchTasks(ctx, &reevev1.WatchTasksRequest{StartRevision: list.GetRevision(), View: reevev1.TaskView_TASK_VIEW_FULL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Namespace: "other", TaskId: "elsewhere", Workflow: inline(step("x", "t"))}); err != nil {
		t.Fatal(err)
	}
	submitMany(t, c, "after", 1, "wf", bigInput(t, 1000))
	got := recvChanged(t, basic, "after-0000")
	if got.GetTask().GetInput() != nil || got.GetRevision() <= list.GetRevision() || got.GetDeleted() {
		t.Fatalf("basic watch got %v, want after-0000 without its input, after revision %d", got, list.GetRevision())
	}
	if got := recvChanged(t, full, "after-0000"); got.GetTask().GetInput() == nil {
		t.Fatalf("full watch got %v without its input", got)
	}
	// Nothing of the other namespace came (recvChanged fails on any other
	// id only after 100 events; check the first event directly instead).
	again, err := c.WatchTasks(ctx, &reevev1.WatchTasksRequest{StartRevision: list.GetRevision()})
	if err != nil {
		t.Fatal(err)
	}
	m, err := again.Recv()
	if err != nil || m.GetChanged().GetTask().GetId() != "after-0000" {
		t.Fatalf("first event after revision %d: %v, %v; want after-0000 (not the other namespace's task)", list.GetRevision(), m, err)
	}
}

// After etcd compacted past the client's revision the watch starts with a
// reset at the current revision, then changes follow.
func TestWatchTasksResetAfterCompaction(t *testing.T) {
	env, _, c := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	submitMany(t, c, "old", 1, "wf", nil)
	list, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	submitMany(t, c, "missed", 3, "wf", nil)
	cli := env.Etcd.Client()
	// A write after the missed ones, so that the compaction passes the
	// revision the watch resumes from (list revision + 1) whatever the
	// batching of the submissions.
	cur, err := cli.Put(ctx, "compact-probe", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, cur.Header.Revision); err != nil {
		t.Fatal(err)
	}
	t.Logf("list revision %d, compacted at %d", list.GetRevision(), cur.Header.Revision)
	w, err := c.WatchTasks(ctx, &reevev1.WatchTasksRequest{StartRevision: list.GetRevision()})
	if err != nil {
		t.Fatal(err)
	}
	m, err := w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if m.GetReset_() == nil || m.GetReset_().GetRevision() < cur.Header.Revision {
		t.Fatalf("first event %v, want a reset at revision %d or later", m, cur.Header.Revision)
	}
	submitMany(t, c, "new", 1, "wf", nil)
	if got := recvChanged(t, w, "new-0000"); got.GetRevision() <= m.GetReset_().GetRevision() {
		t.Fatalf("change at revision %d, not after the reset's %d", got.GetRevision(), m.GetReset_().GetRevision())
	}
}

func TestWatchTasksRefusesBadRequests(t *testing.T) {
	_, _, c := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for field, req := range map[string]*reevev1.WatchTasksRequest{
		"start_revision": {StartRevision: -1},
		"view":           {View: 7},
		"namespace":      {Namespace: "a/b"},
	} {
		w, err := c.WatchTasks(ctx, req)
		if err == nil {
			_, err = w.Recv()
		}
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: got %v, want INVALID_ARGUMENT", field, err)
		}
	}
}

// Counts per state come from the state indexes, for the namespace or one
// workflow of it, with every state present.
func TestCountTasksByState(t *testing.T) {
	_, s, c := newEnv(t)
	submitMany(t, c, "p", 3, "alpha", nil)
	submitMany(t, c, "q", 2, "beta", nil)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "r", Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{
		InlineWorkflow: &reevev1.Workflow{Name: "alpha", Steps: []*reevev1.StepSpec{step("x", "served")}}}}); err != nil {
		t.Fatal(err)
	}
	testenvConnect(t, s.Addr, "served")
	for _, tc := range []struct {
		wf               string
		pending, running int64
	}{{"", 5, 1}, {"alpha", 3, 1}, {"beta", 2, 0}, {"gamma", 0, 0}} {
		resp, err := c.CountTasks(ctx, &reevev1.CountTasksRequest{Workflow: tc.wf})
		if err != nil {
			t.Fatal(err)
		}
		by := resp.GetByState()
		if by["TASK_STATE_PENDING"] != tc.pending || by["TASK_STATE_RUNNING"] != tc.running || len(by) != 7 {
			t.Errorf("workflow %q: counts %v, want %d pending, %d running, 7 states", tc.wf, by, tc.pending, tc.running)
		}
	}
	if _, err := c.CountTasks(ctx, &reevev1.CountTasksRequest{Workflow: "a/b"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad workflow: %v, want INVALID_ARGUMENT", err)
	}
}
