package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// waitBatch waits until the job ends and returns it.
func waitBatch(t *testing.T, b reevev1.BatchServiceClient, id string) *reevev1.BatchJob {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := b.GetBatch(ctx, &reevev1.GetBatchRequest{BatchId: id})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if j := resp.GetJob(); j.GetState() != reevev1.BatchState_BATCH_STATE_RUNNING {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %s still running: %v", id, resp.GetJob())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func countEvents(task *reevev1.Task, kind string) int {
	n := 0
	for _, e := range task.GetHistory() {
		if e.GetKind() == kind {
			n++
		}
	}
	return n
}

// A batch job cancels every task its filter matches, across pages, and
// nothing else: not a task of another workflow, not one created after it
// started (issue 37).
func TestBatchCancelsWhatTheFilterMatches(t *testing.T) {
	_, s, c := newEnv(t)
	b := reevev1.NewBatchServiceClient(testenv.Dial(t, s.Addr))
	const n = 1100 // three pages
	for i := range n {
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("b-%04d", i), Workflow: inline(step("a", "nobody-serves-this"))})
	}
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "other", Workflow: inline(step("a", "nobody-serves-this"))})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := b.StartBatch(ctx, &reevev1.StartBatchRequest{Action: reevev1.BatchAction_BATCH_ACTION_CANCEL, Reason: "cleanup",
		Filter: &reevev1.TaskFilter{TaskIdPrefix: "b-", State: reevev1.TaskState_TASK_STATE_PENDING}})
	if err != nil || !resp.GetCreated() {
		t.Fatalf("start: %v, %v", resp, err)
	}
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "b-late", Workflow: inline(step("a", "nobody-serves-this"))})
	j := waitBatch(t, b, resp.GetJob().GetId())
	if j.GetState() != reevev1.BatchState_BATCH_STATE_SUCCEEDED || j.GetMatched() != n || j.GetApplied() != n || j.GetFailed() != 0 {
		t.Fatalf("job %v: want SUCCEEDED with %d matched and applied", j, n)
	}
	for _, id := range []string{"b-0000", "b-0550", fmt.Sprintf("b-%04d", n-1)} {
		if st := getTask(t, c, id).GetState(); st != reevev1.TaskState_TASK_STATE_CANCELED {
			t.Fatalf("%s is %v, want CANCELED", id, st)
		}
	}
	for _, id := range []string{"other", "b-late"} {
		if st := getTask(t, c, id).GetState(); st != reevev1.TaskState_TASK_STATE_PENDING {
			t.Fatalf("%s is %v, want untouched (PENDING)", id, st)
		}
	}
}

// A job whose runner died (its owner key under a lease that ends) is taken
// over by a live scheduler, and the page the dead runner had begun is done
// again without acting twice on a task: each task is paused once.
func TestBatchTakenOverActsOnEachTaskOnce(t *testing.T) {
	env, s, c := newEnv(t)
	b := reevev1.NewBatchServiceClient(testenv.Dial(t, s.Addr))
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	const n, before = 30, 10
	for i := range n {
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("p-%02d", i), Workflow: inline(step("a", "nobody-serves-this"))})
	}
	// The dead runner: it owns the job, and paused some tasks with the
	// job's request id before it died without saving the page.
	const id = "job-1"
	etcd := env.Etcd.Client()
	lease, err := etcd.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Put(ctx, "/reeve/batch-owner/default/"+id, "", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	for i := range before {
		if _, err := sup.PauseTask(ctx, &reevev1.PauseTaskRequest{TaskId: fmt.Sprintf("p-%02d", i), RequestId: "batch-" + id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.StartBatch(ctx, &reevev1.StartBatchRequest{BatchId: id, Action: reevev1.BatchAction_BATCH_ACTION_PAUSE,
		Filter: &reevev1.TaskFilter{TaskIdPrefix: "p-"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Revoke(ctx, lease.ID); err != nil { // the dead runner's lease ends
		t.Fatal(err)
	}
	j := waitBatch(t, b, id)
	if j.GetState() != reevev1.BatchState_BATCH_STATE_SUCCEEDED || j.GetMatched() != n || j.GetApplied() != n {
		t.Fatalf("job %v: want SUCCEEDED with %d matched and applied", j, n)
	}
	for i := range n {
		task := getTask(t, c, fmt.Sprintf("p-%02d", i))
		if !task.GetPaused() || countEvents(task, "task.paused") != 1 {
			t.Fatalf("%s: paused %v with %d task.paused events, want paused once", task.GetId(), task.GetPaused(), countEvents(task, "task.paused"))
		}
	}
	// Cancelling an ended job answers with it; a retry of the start
	// returns the same job.
	if resp, err := b.CancelBatch(ctx, &reevev1.CancelBatchRequest{BatchId: id}); err != nil || resp.GetJob().GetState() != reevev1.BatchState_BATCH_STATE_SUCCEEDED {
		t.Fatalf("cancel of an ended job: %v, %v", resp.GetJob(), err)
	}
	if resp, err := b.StartBatch(ctx, &reevev1.StartBatchRequest{BatchId: id, Action: reevev1.BatchAction_BATCH_ACTION_PAUSE,
		Filter: &reevev1.TaskFilter{TaskIdPrefix: "p-"}}); err != nil || resp.GetCreated() {
		t.Fatalf("the same start again: %v, %v; want the job, not created", resp, err)
	}
}

// A job canceled before it ran touches nothing, also once a runner could
// claim it; a job that retries and reruns acts through those actions.
func TestBatchCanceledJobTouchesNothing(t *testing.T) {
	env, s, c := newEnv(t)
	b := reevev1.NewBatchServiceClient(testenv.Dial(t, s.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for i := range 5 {
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("k-%d", i), Workflow: inline(step("a", "nobody-serves-this"))})
	}
	// A runner holds the job (a lease of the test's) so that it cannot
	// start before it is canceled.
	etcd := env.Etcd.Client()
	lease, err := etcd.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Put(ctx, "/reeve/batch-owner/default/held", "", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.StartBatch(ctx, &reevev1.StartBatchRequest{BatchId: "held", Action: reevev1.BatchAction_BATCH_ACTION_CANCEL,
		Filter: &reevev1.TaskFilter{TaskIdPrefix: "k-"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := b.CancelBatch(ctx, &reevev1.CancelBatchRequest{BatchId: "held"})
	if err != nil || resp.GetJob().GetState() != reevev1.BatchState_BATCH_STATE_CANCELED {
		t.Fatalf("cancel: %v, %v", resp.GetJob(), err)
	}
	if _, err := etcd.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	// A later job runs through the runner's next look at the jobs, which
	// passes the canceled one by.
	later, err := b.StartBatch(ctx, &reevev1.StartBatchRequest{Action: reevev1.BatchAction_BATCH_ACTION_PAUSE,
		Filter: &reevev1.TaskFilter{TaskIdPrefix: "k-0"}})
	if err != nil {
		t.Fatal(err)
	}
	if j := waitBatch(t, b, later.GetJob().GetId()); j.GetApplied() != 1 {
		t.Fatalf("later job %v, want 1 applied", j)
	}
	for i := range 5 {
		if st := getTask(t, c, fmt.Sprintf("k-%d", i)).GetState(); st != reevev1.TaskState_TASK_STATE_PENDING {
			t.Fatalf("k-%d is %v: the canceled job acted", i, st)
		}
	}
	if j := waitBatch(t, b, "held"); j.GetMatched() != 0 {
		t.Fatalf("canceled job %v, want nothing matched", j)
	}
}
