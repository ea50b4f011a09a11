package store_test

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
)

// recordAt is a task record of workflow wf created at t0 + i ms.
func recordAt(i int, wf string, state reevev1.TaskState) *storev1.TaskRecord {
	rec := record(fmt.Sprintf("task-%06d", i))
	rec.Task.Workflow.Name = wf
	rec.Task.State = state
	rec.Task.CreateTime = timestamppb.New(t0.Add(time.Duration(i) * time.Millisecond))
	return rec
}

// Tasks written before the created indexes existed are listed once the
// backfill ran, newest first, and the backfill runs once per store.
func TestBackfillCreatedIndexesListsOldTasks(t *testing.T) {
	s, c := newStore(t)
	const n = 70 // more than one backfill page
	for i := range n {
		if _, _, err := s.CreateTask(ctx(t), recordAt(i, "wf", reevev1.TaskState_TASK_STATE_PENDING)); err != nil {
			t.Fatal(err)
		}
	}
	// What a store written by an older Reeve looks like: no created keys.
	for _, p := range []string{"created-state/", "created-wf-state/"} {
		if _, err := c.Delete(ctx(t), "/reeve/"+p, clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
	}
	q := store.TaskQuery{Namespace: "default", Limit: 1000}
	if page, err := s.QueryTasks(ctx(t), q); err != nil || len(page.Tasks) != 0 {
		t.Fatalf("before the backfill: %d tasks, %v; want none (the setup failed)", len(page.Tasks), err)
	}
	visited, err := s.BackfillCreatedIndexes(ctx(t))
	if err != nil || visited != n {
		t.Fatalf("backfill visited %d, %v; want %d", visited, err, n)
	}
	for _, q := range []store.TaskQuery{q, {Namespace: "default", Limit: 1000, Workflow: "wf", State: reevev1.TaskState_TASK_STATE_PENDING}} {
		page, err := s.QueryTasks(ctx(t), q)
		if err != nil || len(page.Tasks) != n || page.Tasks[0].GetId() != fmt.Sprintf("task-%06d", n-1) {
			t.Fatalf("after the backfill, query %+v: %d tasks, %v; want %d, newest first", q, len(page.Tasks), err, n)
		}
	}
	if visited, err := s.BackfillCreatedIndexes(ctx(t)); err != nil || visited != 0 {
		t.Fatalf("second backfill visited %d, %v; want 0 (done once)", visited, err)
	}
}

// The backfill writes created keys only where they are missing: a task a
// newer Reeve wrote keeps its keys untouched (a scheduler's start-up
// backfill once rewrote them under a test comparing etcd before and after).
func TestBackfillLeavesExistingCreatedKeysAlone(t *testing.T) {
	s, c := newStore(t)
	if _, _, err := s.CreateTask(ctx(t), recordAt(1, "wf", reevev1.TaskState_TASK_STATE_PENDING)); err != nil {
		t.Fatal(err)
	}
	revs := func() map[string]int64 {
		resp, err := c.Get(ctx(t), "/reeve/created", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, kv := range resp.Kvs {
			out[string(kv.Key)] = kv.ModRevision
		}
		return out
	}
	before := revs()
	if len(before) != 2 {
		t.Fatalf("%d created keys, want 2 (created-state, created-wf-state): %v", len(before), before)
	}
	if _, err := s.BackfillCreatedIndexes(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if after := revs(); !maps.Equal(before, after) {
		t.Fatalf("backfill rewrote existing created keys: %v -> %v", before, after)
	}
}

// A task's created keys go with its record: deleting it deletes them.
func TestCreatedIndexesFollowTheRecord(t *testing.T) {
	s, c := newStore(t)
	if _, _, err := s.CreateTask(ctx(t), recordAt(1, "wf", reevev1.TaskState_TASK_STATE_PENDING)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.UpdateTask(ctx(t), "default", "task-000001", func(t *reevev1.Task) error {
		t.State = reevev1.TaskState_TASK_STATE_RUNNING
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/reeve/created-state/default/TASK_STATE_RUNNING/",
		"/reeve/created-wf-state/default/wf/TASK_STATE_RUNNING/",
	}
	for _, p := range want {
		if got := keys(t, c, p[len("/reeve/"):]); len(got) != 1 {
			t.Errorf("keys under %s: %v, want the task's one", p, got)
		}
	}
	for _, p := range []string{"created-state/default/TASK_STATE_PENDING/", "created-wf-state/default/wf/TASK_STATE_PENDING/"} {
		if got := keys(t, c, p); len(got) != 0 {
			t.Errorf("keys under %s: %v, want none after the state changed", p, got)
		}
	}
}

// Tasks far apart in time (decades, a day, the future) are all listed, in
// order, one page at a time: the create-time windows a page reads (see
// QueryTasks) cover the whole range.
func TestQueryTasksFindsTasksFarApartInTime(t *testing.T) {
	s, _ := newStore(t)
	now := time.Now()
	at := []time.Time{now.Add(48 * time.Hour), now, now.Add(-time.Second), now.Add(-24 * time.Hour), now.AddDate(-30, 0, 0), time.Unix(0, 1)}
	for i, ct := range at {
		rec := recordAt(i, "wf", reevev1.TaskState_TASK_STATE_PENDING)
		rec.Task.CreateTime = timestamppb.New(ct)
		if _, _, err := s.CreateTask(ctx(t), rec); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []store.TaskQuery{
		{Namespace: "default", Limit: 1},
		{Namespace: "default", Limit: 1, Workflow: "wf"},
		{Namespace: "default", Limit: 1, CreatedBefore: now.Add(time.Nanosecond), CreatedAfter: now.AddDate(-31, 0, 0)},
	} {
		var got []int
		for range 20 {
			page, err := s.QueryTasks(ctx(t), q)
			if err != nil {
				t.Fatal(err)
			}
			for _, task := range page.Tasks {
				var i int
				fmt.Sscanf(task.GetId(), "task-%06d", &i)
				got = append(got, i)
			}
			if page.Next == nil {
				break
			}
			q.After = page.Next
		}
		want := "[0 1 2 3 4 5]"
		if !q.CreatedBefore.IsZero() {
			want = "[1 2 3 4]"
		}
		if fmt.Sprint(got) != want {
			t.Errorf("query %+v listed %v, want %s", q, got, want)
		}
	}
}

// A prefix matching only old tasks spends the scan budget: the page ends
// early, empty, with a position, and following pages find the matches.
func TestQueryTasksPrefixScanBudget(t *testing.T) {
	s, _ := newStore(t)
	for i := range 30 {
		rec := recordAt(i, "wf", reevev1.TaskState_TASK_STATE_PENDING)
		if i < 2 {
			rec.Task.Id = fmt.Sprintf("old-%d", i)
		}
		if _, _, err := s.CreateTask(ctx(t), rec); err != nil {
			t.Fatal(err)
		}
	}
	q := store.TaskQuery{Namespace: "default", Limit: 5, IDPrefix: "old-", MaxScan: 10}
	var got []string
	calls := 0
	for ; calls < 10; calls++ {
		page, err := s.QueryTasks(ctx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		if calls == 0 && (len(page.Tasks) != 0 || page.Next == nil) {
			t.Fatalf("first call: %d tasks, next %v; want none and a position (budget spent)", len(page.Tasks), page.Next)
		}
		for _, task := range page.Tasks {
			got = append(got, task.GetId())
		}
		if page.Next == nil {
			break
		}
		q.After = page.Next
	}
	if fmt.Sprint(got) != "[old-1 old-0]" || calls < 2 {
		t.Fatalf("listed %v in %d calls, want [old-1 old-0] in several", got, calls+1)
	}
}

// Index keys whose record is gone (left by an older retention sweeper) are
// skipped: the page is shorter, never a panic, and the next one goes on.
func TestQueryTasksSkipsIndexKeysWithoutRecord(t *testing.T) {
	s, c := newStore(t)
	for i := range 5 {
		if _, _, err := s.CreateTask(ctx(t), recordAt(i, "wf", reevev1.TaskState_TASK_STATE_PENDING)); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range []int{4, 3, 2} {
		if _, err := c.Delete(ctx(t), fmt.Sprintf("/reeve/tasks/default/task-%06d", i)); err != nil {
			t.Fatal(err)
		}
	}
	got := pagedIDs(t, s, store.TaskQuery{Namespace: "default", Limit: 2})
	if fmt.Sprint(got) != "[task-000001 task-000000]" {
		t.Fatalf("listed %v, want the two tasks with records", got)
	}
}

// A basic-view page (TaskQuery.Basic, decoded without inputs, histories and
// outputs) holds the same tasks as a page of whole records trimmed to the
// basic view, with records small and large mixed so that the page reads
// them in batches of several sizes (one 300 KB record per transaction).
func TestQueryTasksBasicEqualsTrimmedRecords(t *testing.T) {
	s, _ := newStore(t)
	const n = 40
	for i := range n {
		rec := recordAt(i, "wf", reevev1.TaskState_TASK_STATE_PENDING)
		size := 10
		if i%3 == 0 {
			size = 300_000
		}
		rec.Task.Input = structpb.NewStringValue(strings.Repeat("x", size))
		rec.Task.History = []*reevev1.HistoryEvent{{Kind: "task.submitted"}}
		rec.Task.Steps[0].Output = structpb.NewStringValue("out")
		if _, _, err := s.CreateTask(ctx(t), rec); err != nil {
			t.Fatal(err)
		}
	}
	trim := func(t *reevev1.Task) {
		t.Input, t.History = nil, nil
		t.Workflow = &reevev1.Workflow{Namespace: t.GetWorkflow().GetNamespace(), Name: t.GetWorkflow().GetName(), Version: t.GetWorkflow().GetVersion()}
		for _, st := range t.GetSteps() {
			st.Output = nil
		}
	}
	full, err := s.QueryTasks(ctx(t), store.TaskQuery{Namespace: "default", Limit: 1000, Trim: trim, MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	basic, err := s.QueryTasks(ctx(t), store.TaskQuery{Namespace: "default", Limit: 1000, Basic: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(full.Tasks) != n || len(basic.Tasks) != n || basic.Next != nil {
		t.Fatalf("trimmed page %d tasks, basic page %d (next %v); want %d in one page each", len(full.Tasks), len(basic.Tasks), basic.Next, n)
	}
	for i := range full.Tasks {
		if !proto.Equal(full.Tasks[i], basic.Tasks[i]) {
			t.Fatalf("task %d: basic %v, want the trimmed record %v", i, basic.Tasks[i], full.Tasks[i])
		}
		if basic.Tasks[i].GetInput() != nil || basic.Tasks[i].GetSteps()[0].GetOutput() != nil {
			t.Fatalf("task %d: the basic view has an input or an output", i)
		}
	}
}

// pagedIDs follows q's pages (at most 100) and returns the ids listed.
func pagedIDs(t *testing.T, s *store.Store, q store.TaskQuery) []string {
	t.Helper()
	var got []string
	for range 100 {
		page, err := s.QueryTasks(ctx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range page.Tasks {
			got = append(got, task.GetId())
		}
		if page.Next == nil {
			return got
		}
		q.After = page.Next
	}
	t.Fatalf("%+v: more than 100 pages", q)
	return nil
}
