package scheduler_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// With an archive, a task canceled with nothing to undo keeps only its
// record and ended key in etcd during the grace window, and ListTasks
// (every state, the state, pages of one) and CountTasks still show it.
func TestArchiveGraceWindowTasksListedWithoutIndexKeys(t *testing.T) {
	env := testenv.New(t)
	a := openArchive(t, archiveDSN(t, "sqlite"))
	s := env.StartScheduler("", scheduler.WithArchive(a, time.Hour))
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	tasks := submitPending(t, c, "g", 3)
	cancelTask(t, c, tasks[1].GetId())
	keys := etcdKeysOf(t, env, []string{tasks[1].GetId()})
	slices.Sort(keys)
	if len(keys) != 2 || !strings.Contains(keys[0], "/ended/") || !strings.Contains(keys[1], "/tasks/default/") {
		t.Fatalf("etcd keys of the canceled task: %v; want its ended key and its record only", keys)
	}
	for _, req := range []*reevev1.ListTasksRequest{{}, {PageSize: 1}, {State: reevev1.TaskState_TASK_STATE_CANCELED}} {
		var ids []string
		for range 10 {
			resp, err := c.ListTasks(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			for _, lt := range resp.GetTasks() {
				ids = append(ids, lt.GetId())
			}
			if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
				break
			}
		}
		want := []string{"g-002", "g-001", "g-000"}
		if req.GetState() != 0 {
			want = []string{"g-001"}
		}
		if !slices.Equal(ids, want) {
			t.Errorf("list %v: %v, want %v", req, ids, want)
		}
	}
	counts, err := c.CountTasks(ctx, &reevev1.CountTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[reevev1.TaskState]int64{reevev1.TaskState_TASK_STATE_PENDING: 2, reevev1.TaskState_TASK_STATE_CANCELED: 1}
	for _, sc := range counts.GetCounts() {
		if sc.GetCount() != want[sc.GetState()] {
			t.Errorf("count of %v = %d; want %d", sc.GetState(), sc.GetCount(), want[sc.GetState()])
		}
	}
}
