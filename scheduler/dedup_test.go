package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/scheduler"
)

// With PostgreSQL down, submissions with chosen ids go on: a new id is
// created (the deduplication window shows no task with it moved to the
// archive), while the resubmission of an archived task's id is refused
// UNAVAILABLE, never created a second time, on the scheduler that moved it
// and on one started during the outage (which lists the window from etcd).
// Once the archive is back, the resubmission gets the archived task. With
// the window off, every chosen id waits for the archive, as before it.
func TestArchiveOutageDedupWindow(t *testing.T) {
	o := startPGArchiving(t)
	srv, env, a, reader, c1 := o.srv, o.env, o.a, o.reader, o.c
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	archived := submitPending(t, c1, "d", 2)
	for _, task := range archived {
		cancelTask(t, c1, task.GetId())
	}
	waitArchived(t, env, a, "d-000", "d-001")
	srv.Stop(t)

	// Started during the outage: it lists the window from etcd.
	s2 := env.StartScheduler("", archiving(a)...)
	c2 := s2.Client(t)
	// Without a window: every chosen id waits for the archive.
	s3 := env.StartScheduler("", archiving(a, scheduler.WithArchiveDedupWindow(0))...)
	c3 := s3.Client(t)

	again := func(id string) *reevev1.SubmitTaskRequest {
		return &reevev1.SubmitTaskRequest{TaskId: id, Workflow: inline(step("a", "nobody-serves-this"))}
	}
	for i, c := range []reevev1.SchedulerServiceClient{c1, c2} {
		for _, id := range []string{"d-000", "d-001"} {
			_, err := c.SubmitTask(ctx, again(id))
			if status.Code(err) != codes.Unavailable {
				t.Errorf("scheduler %d: resubmission of archived %s with the archive down: %v; want UNAVAILABLE", i+1, id, err)
			}
		}
		for j := range 10 {
			id := fmt.Sprintf("new-%d-%d", i+1, j)
			resp, err := c.SubmitTask(ctx, again(id))
			if err != nil {
				t.Fatalf("scheduler %d: new task %s with the archive down: %v", i+1, id, err)
			}
			if resp.GetTask().GetState() != reevev1.TaskState_TASK_STATE_PENDING {
				t.Errorf("new task %s is %s", id, resp.GetTask().GetState())
			}
		}
	}
	if _, err := c3.SubmitTask(ctx, again("new-3-0")); status.Code(err) != codes.Unavailable {
		t.Errorf("without a window, a new chosen id with the archive down: %v; want UNAVAILABLE", err)
	}
	for _, id := range []string{"d-000", "d-001", "new-3-0"} {
		if got, err := env.Etcd.Client().Get(ctx, "/reeve/tasks/default/"+id, clientv3.WithCountOnly()); err != nil || got.Count != 0 {
			t.Fatalf("%s was created in etcd during the outage (%v, %v)", id, got, err)
		}
	}
	if n := counterSum(t, reader, "reeve.archive.dedup_window_answers"); n != 12 {
		t.Errorf("reeve.archive.dedup_window_answers = %d; want 12 (10 created, 2 refused on scheduler 1)", n)
	}

	srv.Start(t)
	deadline := time.Now().Add(wait)
	for {
		resp, err := c2.SubmitTask(ctx, again("d-000"))
		if err == nil {
			if resp.GetTask().GetState() != reevev1.TaskState_TASK_STATE_CANCELED {
				t.Fatalf("resubmission after the outage: task %s; want the archived CANCELED one", resp.GetTask().GetState())
			}
			break
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatalf("resubmission after the outage: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
