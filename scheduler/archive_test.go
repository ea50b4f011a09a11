package scheduler_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/archive"
	"github.com/reeve-org/reeve/internal/pgtest"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// archiveBackends are the archives the scheduler's archive tests run
// against, each a real database.
var archiveBackends = []string{"sqlite", "postgres"}

// openArchive opens an empty archive of the named kind for the test (two
// opens of one test share it when dsn is given).
func archiveDSN(t *testing.T, kind string) string {
	t.Helper()
	if kind == "sqlite" {
		return "sqlite:" + filepath.Join(t.TempDir(), "archive.db")
	}
	return pgtest.Start(t)
}

func openArchive(t *testing.T, dsn string) archive.Archive {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	a, err := archive.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("open archive: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// archiving moves tasks to a right after they end.
func archiving(a archive.Archive, more ...scheduler.Option) []scheduler.Option {
	return append([]scheduler.Option{scheduler.WithArchive(a, 0), scheduler.WithArchiveInterval(20 * time.Millisecond)}, more...)
}

// submitPending submits n one-step tasks no agent serves, ids prefix-000..,
// created in that order.
func submitPending(t *testing.T, c reevev1.SchedulerServiceClient, prefix string, n int) []*reevev1.Task {
	t.Helper()
	var tasks []*reevev1.Task
	for i := range n {
		tasks = append(tasks, submit(t, c, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("%s-%03d", prefix, i),
			Workflow: inline(step("a", "nobody-serves-this"))}))
	}
	return tasks
}

func cancelTask(t *testing.T, c reevev1.SchedulerServiceClient, id string) *reevev1.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: id})
	if err != nil {
		t.Fatalf("cancel %s: %v", id, err)
	}
	return resp.GetTask()
}

// waitArchived waits until the tasks are in the archive and no key of
// theirs is left in etcd.
func waitArchived(t *testing.T, env *testenv.Env, a archive.Archive, ids ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for {
		has, err := a.Has(ctx, "default", ids)
		if err == nil && len(has) == len(ids) && len(etcdKeysOf(t, env, ids)) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("tasks %v not archived (archive has %v, etcd still holds %v; last error %v)", ids, has, etcdKeysOf(t, env, ids), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// etcdKeysOf returns the etcd keys that name any of the tasks.
func etcdKeysOf(t *testing.T, env *testenv.Env, ids []string) []string {
	t.Helper()
	var keys []string
	for k := range testenv.DataKeys(t, env.Etcd.Client()) {
		for _, id := range ids {
			if strings.HasSuffix(k, "/"+id) || strings.Contains(k, "/"+id+"/") {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// A task that ended moves to the archive, leaves nothing in etcd, and every
// read finds it there as it was: GetTask (which says it is archived),
// WatchTask, ListTasks, CountTasks,
// an idempotent resubmission, a cancel; an operator action is refused as on
// an ended task.
func TestArchivedTaskIsReadAsBefore(t *testing.T) {
	for _, kind := range archiveBackends {
		t.Run(kind, func(t *testing.T) {
			env := testenv.New(t)
			a := openArchive(t, archiveDSN(t, kind))
			s := env.StartScheduler("", archiving(a)...)
			c := s.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()

			req := &reevev1.SubmitTaskRequest{TaskId: "order-1", Workflow: inline(step("a", "nobody-serves-this")), Input: testenv.Value(t, map[string]any{"sku": "x"})}
			submit(t, c, req)
			live := submitPending(t, c, "live", 1)[0]
			ended := cancelTask(t, c, "order-1")
			waitArchived(t, env, a, "order-1")

			got, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "order-1"})
			if err != nil || !proto.Equal(got.GetTask(), ended) || !got.GetArchived() {
				t.Fatalf("GetTask of the archived task = %v (archived %v), %v; want the task as it ended, archived", got.GetTask(), got.GetArchived(), err)
			}
			if got, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: live.GetId()}); err != nil || got.GetArchived() {
				t.Fatalf("GetTask of the live task: archived %v, %v; want not archived", got.GetArchived(), err)
			}
			if w := testenv.WaitTask(t, c, "default", "order-1", wait); !proto.Equal(w, ended) {
				t.Fatalf("WatchTask of the archived task = %v; want its final state", w)
			}
			again, err := c.SubmitTask(ctx, req)
			if err != nil || again.GetCreated() || !proto.Equal(again.GetTask(), ended) {
				t.Fatalf("resubmission of the archived task = created %v, %v, %v; want created=false with the archived task", again.GetCreated(), again.GetTask().GetState(), err)
			}
			other := proto.Clone(req).(*reevev1.SubmitTaskRequest)
			other.Input = nil
			if _, err := c.SubmitTask(ctx, other); status.Code(err) != codes.AlreadyExists {
				t.Fatalf("a different submission with the archived task's id: %v; want ALREADY_EXISTS", err)
			}
			if got := cancelTask(t, c, "order-1"); !proto.Equal(got, ended) {
				t.Fatalf("cancel of the archived task = %v; want it unchanged", got)
			}
			sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
			_, err = sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: "order-1", Step: "a"})
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "archive") {
				t.Fatalf("operator retry of an archived task: %v; want FAILED_PRECONDITION naming the archive", err)
			}
			list, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, lt := range list.GetTasks() {
				ids = append(ids, lt.GetId())
				if lt.GetInput() != nil {
					t.Errorf("basic list of %s carries the input", lt.GetId())
				}
			}
			if !slices.Equal(ids, []string{live.GetId(), "order-1"}) {
				t.Fatalf("list = %v; want the live task then the archived one, newest first", ids)
			}
			if got := list.GetArchivedTaskIds(); !slices.Equal(got, []string{"order-1"}) {
				t.Fatalf("list's archived_task_ids = %v; want the archived task only", got)
			}
			counts, err := c.CountTasks(ctx, &reevev1.CountTasksRequest{})
			if err != nil {
				t.Fatal(err)
			}
			want := map[reevev1.TaskState]int64{reevev1.TaskState_TASK_STATE_PENDING: 1, reevev1.TaskState_TASK_STATE_CANCELED: 1}
			for _, sc := range counts.GetCounts() {
				if sc.GetCount() != want[sc.GetState()] {
					t.Errorf("count of %v = %d; want %d", sc.GetState(), sc.GetCount(), want[sc.GetState()])
				}
			}
		})
	}
}

// A list read in pages while tasks move to the archive between the pages
// lists every task exactly once, in order.
func TestListPagesAcrossTheArchive(t *testing.T) {
	for _, kind := range archiveBackends {
		t.Run(kind, func(t *testing.T) {
			env := testenv.New(t)
			a := openArchive(t, archiveDSN(t, kind))
			s := env.StartScheduler("", archiving(a)...)
			c := s.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()

			// An empty list: no task anywhere.
			if resp, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{}); err != nil || len(resp.GetTasks()) != 0 || resp.GetNextPageToken() != "" {
				t.Fatalf("list of nothing = %v, %v", resp, err)
			}
			tasks := submitPending(t, c, "t", 30)
			var want []string
			for _, tk := range slices.Backward(tasks) {
				want = append(want, tk.GetId()) // newest first
			}
			// A third archived before the first page.
			var moved []string
			for i := 0; i < 30; i += 3 {
				cancelTask(t, c, tasks[i].GetId())
				moved = append(moved, tasks[i].GetId())
			}
			waitArchived(t, env, a, moved...)

			var got []string
			token := ""
			for page := 0; ; page++ {
				resp, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{PageSize: 7, PageToken: token})
				if err != nil {
					t.Fatal(err)
				}
				for _, tk := range resp.GetTasks() {
					got = append(got, tk.GetId())
				}
				token = resp.GetNextPageToken()
				if token == "" {
					break
				}
				if page == 0 {
					// Another third moves while the list is read.
					moved = moved[:0]
					for i := 1; i < 30; i += 3 {
						cancelTask(t, c, tasks[i].GetId())
						moved = append(moved, tasks[i].GetId())
					}
					waitArchived(t, env, a, moved...)
				}
				if page > 20 {
					t.Fatal("more than 20 pages of 7 for 30 tasks")
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("pages listed\n%v\nwant every task once, newest first\n%v", got, want)
			}
			// Filters apply on both sides: the canceled ones of the first
			// ten, newest first.
			resp, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{State: reevev1.TaskState_TASK_STATE_CANCELED, TaskIdPrefix: "t-00", PageSize: 100})
			if err != nil {
				t.Fatal(err)
			}
			var canceled []string
			for _, tk := range resp.GetTasks() {
				canceled = append(canceled, tk.GetId())
			}
			if w := []string{"t-009", "t-007", "t-006", "t-004", "t-003", "t-001", "t-000"}; !slices.Equal(canceled, w) {
				t.Fatalf("canceled with prefix t-00 = %v; want %v", canceled, w)
			}
			// Every one of them has moved: each is marked as read from the
			// archive.
			if got := resp.GetArchivedTaskIds(); !slices.Equal(got, canceled) {
				t.Fatalf("archived_task_ids = %v; want every canceled task listed, %v", got, canceled)
			}
		})
	}
}

// A scheduler that stopped between the archive write and the etcd delete
// leaves a task in both: reads list and count it once (counts: at most
// twice for that moment, documented), and the next scheduler finishes the
// move.
func TestArchiveMoveFinishedAfterAKillBetweenItsWrites(t *testing.T) {
	env := testenv.New(t)
	dsn := archiveDSN(t, "sqlite")
	a := openArchive(t, dsn)
	s := env.StartScheduler("")
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	submitPending(t, c, "k", 1)
	ended := cancelTask(t, c, "k-000")
	// The first write of the move, as a scheduler killed right after it
	// left it.
	rec, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "k-000"})
	if err != nil {
		t.Fatal(err)
	}
	putArchived(t, a, rec.GetTask())
	s.Crash()

	s2 := env.StartScheduler("", archiving(a)...)
	c2 := s2.Client(t)
	waitArchived(t, env, a, "k-000")
	got, err := c2.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "k-000"})
	if err != nil || !proto.Equal(got.GetTask(), ended) {
		t.Fatalf("GetTask after the move was finished = %v, %v", got.GetTask(), err)
	}
	list, err := c2.ListTasks(ctx, &reevev1.ListTasksRequest{})
	if err != nil || len(list.GetTasks()) != 1 {
		t.Fatalf("list = %v, %v; want the one task once", list.GetTasks(), err)
	}
}

// putArchived writes a task to the archive as the scheduler would.
func putArchived(t *testing.T, a archive.Archive, task *reevev1.Task) {
	t.Helper()
	at, err := scheduler.ArchiveTaskForTest(task)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := a.Put(ctx, []archive.Task{at}); err != nil {
		t.Fatal(err)
	}
}

// With the archive down, ended tasks stay in etcd (nothing lost, reads of
// live tasks unaffected); once it is back they move.
func TestArchiveOutageKeepsTasksInEtcd(t *testing.T) {
	o := startPGArchiving(t)
	srv, env, a, reader, c := o.srv, o.env, o.a, o.reader, o.c
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	submitPending(t, c, "o", 2)
	srv.Stop(t)
	cancelTask(t, c, "o-000")
	// Wait for an archive write to fail: the task must still be in etcd.
	for counterSum(t, reader, "reeve.archive.errors") == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("no archive write failed with the archive down")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if got, err := env.Etcd.Client().Get(ctx, "/reeve/tasks/default/o-000", clientv3.WithCountOnly()); err != nil || got.Count != 1 {
		t.Fatalf("the ended task left etcd while the archive was down: %v, %v", got, err)
	}
	if got, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "o-001"}); err != nil || got.GetTask().GetState() != reevev1.TaskState_TASK_STATE_PENDING {
		t.Fatalf("a live task's read with the archive down: %v, %v", got, err)
	}
	srv.Start(t)
	waitArchived(t, env, a, "o-000")
}

// pgArchiving is a scheduler archiving to a PostgreSQL server a test may
// stop and start, with a reader of its metrics.
type pgArchiving struct {
	srv    *pgtest.Server
	env    *testenv.Env
	a      archive.Archive
	reader *sdkmetric.ManualReader
	c      reevev1.SchedulerServiceClient
}

func startPGArchiving(t *testing.T) pgArchiving {
	t.Helper()
	o := pgArchiving{srv: pgtest.StartServer(t), env: testenv.New(t), reader: sdkmetric.NewManualReader()}
	o.a = openArchive(t, o.srv.DSN("postgres"))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(o.reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	o.c = o.env.StartScheduler("", archiving(o.a, scheduler.WithMeterProvider(mp))...).Client(t)
	return o
}

// With an archive, an alert goes after the retention even when its task was
// retried to success and moved to the archive long before: the archive pass
// deletes old alerts of the namespaces it meets (the retention sweep only
// meets FAILED tasks that stayed).
func TestAlertsOfArchivedTasksGoAfterTheRetention(t *testing.T) {
	env := testenv.New(t)
	a := openArchive(t, archiveDSN(t, "sqlite"))
	s := env.StartScheduler("", archiving(a, scheduler.WithRetention(time.Second), scheduler.WithSweepInterval(50*time.Millisecond))...)
	c := s.Client(t)
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st := step("a", "flaky")
	st.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 1}
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "alerted", Workflow: inline(st)})
	agent := testenv.ConnectRaw(t, s.Addr, register("ag", 1, "flaky"))
	agent.Fail(agent.NextAssignment(wait).GetRef(), &reevev1.StepError{Code: "boom", Message: "down"})
	if alerts, err := sup.ListAlerts(ctx, &reevev1.ListAlertsRequest{}); err != nil || len(alerts.GetAlerts()) != 1 {
		t.Fatalf("alerts after the failure = %v, %v; want one", alerts.GetAlerts(), err)
	}
	if _, err := sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: "alerted", Step: "a"}); err != nil {
		t.Fatal(err)
	}
	agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
	waitArchived(t, env, a, "alerted")
	if alerts, err := sup.ListAlerts(ctx, &reevev1.ListAlertsRequest{IncludeAcknowledged: true}); err != nil || len(alerts.GetAlerts()) != 1 {
		t.Fatalf("alerts once the task moved = %v, %v; want the resolved one, kept for the retention", alerts.GetAlerts(), err)
	}
	for {
		alerts, err := sup.ListAlerts(ctx, &reevev1.ListAlertsRequest{IncludeAcknowledged: true})
		if err == nil && len(alerts.GetAlerts()) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the alert of the archived task is still listed after the retention: %v, %v", alerts.GetAlerts(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Concurrent submissions with chosen ids share the archive's lookups
// (archive_lookup.go): every one is created once, and every resubmission,
// archived or live, gets its task back.
func TestConcurrentSubmissionsCheckTheArchiveTogether(t *testing.T) {
	env := testenv.New(t)
	a := openArchive(t, archiveDSN(t, "sqlite"))
	s := env.StartScheduler("", archiving(a)...)
	c := s.Client(t)
	const n = 64
	submitAll := func() (created int) {
		var wg sync.WaitGroup
		results := make(chan bool, n)
		for i := range n {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				defer cancel()
				resp, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("c-%03d", i), Workflow: inline(step("a", "nobody-serves-this"))})
				if err != nil {
					t.Errorf("submit c-%03d: %v", i, err)
					return
				}
				results <- resp.GetCreated()
			})
		}
		wg.Wait()
		close(results)
		for ok := range results {
			if ok {
				created++
			}
		}
		return created
	}
	if got := submitAll(); got != n {
		t.Fatalf("%d of %d created", got, n)
	}
	var moved []string
	for i := 0; i < n; i += 2 {
		id := fmt.Sprintf("c-%03d", i)
		cancelTask(t, c, id)
		moved = append(moved, id)
	}
	waitArchived(t, env, a, moved...)
	if got := submitAll(); got != 0 {
		t.Fatalf("%d of %d resubmissions created a task again", got, n)
	}
}

// With an archive, a task canceled without undoing its done work stays in
// etcd for the retention, as a FAILED one does, where CompensateTask can
// still undo it; a task canceled with nothing done moves after the grace.
func TestCanceledWithWorkLeftToUndoStaysForTheRetention(t *testing.T) {
	env := testenv.New(t)
	a := openArchive(t, archiveDSN(t, "sqlite"))
	s := env.StartScheduler("", archiving(a, scheduler.WithRetention(time.Hour))...)
	c := s.Client(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 4, "inv.reserve", "inv.release", "pay.charge", "pay.refund", "ship.ship"))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "undo-later", Workflow: ordersFlow()})
	if ack := agent.Succeed(agent.NextAssignment(wait).GetRef(), nil); !ack.GetAccepted() {
		t.Fatalf("reserve refused: %v", ack)
	}
	agent.NextAssignment(wait) // charge, left running
	if _, err := c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: "undo-later", NoCompensate: true}); err != nil {
		t.Fatal(err)
	}
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "nothing-done", Workflow: ordersFlow()})
	cancelTask(t, c, "nothing-done")
	// The archive passes go in end order: once "nothing-done" left etcd, "undo-later"
	// was examined and left there.
	waitArchived(t, env, a, "nothing-done")
	resp, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "undo-later"})
	if err != nil || resp.GetArchived() || resp.GetTask().GetState() != reevev1.TaskState_TASK_STATE_CANCELED {
		t.Fatalf("undo-later: %v archived %v (%v); want CANCELED in etcd", resp.GetTask().GetState(), resp.GetArchived(), err)
	}
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	if _, err := sup.CompensateTask(ctx, &reevev1.CompensateTaskRequest{TaskId: "undo-later"}); err != nil {
		t.Fatalf("compensate the canceled task: %v", err)
	}
	for {
		// Skip what the agent was told about the other task.
		if as := agent.Next(wait).GetAssignment(); as.GetRef().GetTaskId() == "undo-later" {
			if as.GetRef().GetStep() != "reserve" || !as.GetCompensation() {
				t.Fatalf("assigned %v, want reserve's compensation", as.GetRef())
			}
			agent.Succeed(as.GetRef(), nil)
			break
		}
	}
	waitArchived(t, env, a, "undo-later")
}

// Labels (issue 37): a list by label finds the tasks that have it in etcd
// and in the archive (where they moved when they ended), newest first, and
// nothing else; a malformed label is INVALID_ARGUMENT naming it.
func TestListByLabelAcrossTheArchive(t *testing.T) {
	env := testenv.New(t)
	a := openArchive(t, archiveDSN(t, "sqlite"))
	c := env.StartScheduler("", archiving(a)...).Client(t)
	var want []string
	for i := range 12 {
		id := fmt.Sprintf("l-%02d", i)
		team := []string{"a", "b"}[i%2]
		submit(t, c, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: inline(step("a", "nobody-serves-this")), Labels: map[string]string{"team": team}})
		if team == "a" {
			want = append([]string{id}, want...)
		}
	}
	var moved []string
	for i := 0; i < 12; i += 3 {
		id := fmt.Sprintf("l-%02d", i)
		cancelTask(t, c, id)
		moved = append(moved, id)
	}
	waitArchived(t, env, a, moved...)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var got []string
	req := &reevev1.ListTasksRequest{PageSize: 2, Labels: map[string]string{"team": "a"}}
	for range 20 {
		resp, err := c.ListTasks(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range resp.GetTasks() {
			got = append(got, task.GetId())
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("by label: %v, want %v", got, want)
	}
	// Counted the same way: team a is l-00..l-10 even, of which l-00 and
	// l-06 were canceled (and moved).
	counts, err := c.CountTasks(ctx, &reevev1.CountTasksRequest{Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	byState := map[reevev1.TaskState]int64{}
	for _, sc := range counts.GetCounts() {
		byState[sc.GetState()] = sc.GetCount()
	}
	if byState[reevev1.TaskState_TASK_STATE_PENDING] != 4 || byState[reevev1.TaskState_TASK_STATE_CANCELED] != 2 {
		t.Fatalf("counts by label %v, want 4 PENDING and 2 CANCELED", byState)
	}
	_, err = c.ListTasks(ctx, &reevev1.ListTasksRequest{Labels: map[string]string{"bad key": "x"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), `labels["bad key"]`) {
		t.Fatalf("a malformed label: %v, want INVALID_ARGUMENT naming it", err)
	}
}
