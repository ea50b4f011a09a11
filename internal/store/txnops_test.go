package store_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// wide is a task whose workflow has `roots` independent steps and, when
// fanout > 0, a step "hub" with fanout dependents. Every queued step has a
// schedule-to-start timeout, so it holds two index keys (ready, deadline).
func wide(id string, roots, fanout int) *storev1.TaskRecord {
	wf := &reevev1.Workflow{DefaultScheduleToStartTimeout: durationpb.New(time.Hour)}
	for i := range roots {
		wf.Steps = append(wf.Steps, &reevev1.StepSpec{Name: fmt.Sprintf("r%02d", i), Type: "t"})
	}
	if fanout > 0 {
		wf.Steps = append(wf.Steps, &reevev1.StepSpec{Name: "hub", Type: "t"})
		for i := range fanout {
			wf.Steps = append(wf.Steps, &reevev1.StepSpec{Name: fmt.Sprintf("d%02d", i), Type: "t", DependsOn: []string{"hub"}})
		}
	}
	return &storev1.TaskRecord{Task: taskstate.New("default", id, wf, nil, t0), RequestDigest: []byte(id)}
}

func taskKeys(t *testing.T, c *clientv3.Client, prefix, id string) int {
	t.Helper()
	n := 0
	for _, k := range keys(t, c, prefix) {
		if strings.Contains(k+"/", "/"+id+"/") {
			n++
		}
	}
	return n
}

// Defect 1: a task with 61 queued steps (127 operations to create since
// issue 15 dropped the state index, 128 before: the record, its four
// created keys and 122 ready and deadline keys; the 63 before the
// created indexes) could be neither canceled nor failed: ending it
// deleted 126 index keys one by one next to the record, state and ended
// keys, over etcd's limit, and the failure was a retryable UNAVAILABLE.
func TestTaskWith61QueuedStepsCanBeCanceledAndFailed(t *testing.T) {
	s, c := newStore(t)
	for _, end := range []string{"cancel", "fail"} {
		id := "w-" + end
		if _, _, err := s.CreateTask(ctx(t), wide(id, 61, 0)); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
		if got := taskKeys(t, c, "ready/", id) + taskKeys(t, c, "deadlines/", id); got != 122 {
			t.Fatalf("%s: %d ready+deadline keys, want 122", id, got)
		}
		_, after, err := s.UpdateTask(ctx(t), "default", id, func(task *reevev1.Task) error {
			if end == "fail" {
				return taskstate.FailTask(task, "operator", "test", t0)
			}
			return taskstate.Cancel(task, "operator", "test", false, t0)
		})
		if err != nil {
			t.Fatalf("%s %s: %v", end, id, err)
		}
		if !taskstate.TerminalTask(after.GetTask().GetState()) {
			t.Fatalf("%s: state %v", id, after.GetTask().GetState())
		}
		if r, d := taskKeys(t, c, "ready/", id), taskKeys(t, c, "deadlines/", id); r+d != 0 {
			t.Fatalf("%s ended with %d ready and %d deadline keys left", id, r, d)
		}
	}
}

// Defect 1: a step with 60 dependents completes (123 operations: the record,
// its deadline, 60 ready and 60 deadline keys) while hundreds of small
// writes are queued: the batch is cut so that every transaction fits, and
// every write lands. Before, the group commit put it in one transaction
// with up to 63 others, etcd refused the whole batch, and every write of it
// failed as UNAVAILABLE.
func TestWideWriteIsCutFromItsBatchAndEveryWriteLands(t *testing.T) {
	c := etcdtest.New(t).Client()
	s := store.New(c, store.WithGroupCommit(64, 1))
	const small = 300
	if _, _, err := s.CreateTask(ctx(t), wide("hub", 0, 60)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.UpdateTask(ctx(t), "default", "hub", func(task *reevev1.Task) error {
		return taskstate.Claim(task, "hub", 1, "s1", "agent", t0)
	}); err != nil {
		t.Fatal(err)
	}
	for i := range small {
		if _, _, err := s.CreateTask(ctx(t), record(fmt.Sprintf("s%03d", i))); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, small+2)
	for i := range small {
		wg.Go(func() {
			_, _, errs[i] = s.UpdateTask(ctx(t), "default", fmt.Sprintf("s%03d", i), func(task *reevev1.Task) error {
				return taskstate.Claim(task, "a", 1, "s1", "agent", t0)
			})
		})
		if i == small/2 {
			wg.Go(func() {
				_, _, errs[small] = s.UpdateTask(ctx(t), "default", "hub", func(task *reevev1.Task) error {
					return taskstate.Complete(task, taskstate.Ref(task, taskstate.FindStep(task, "hub")), "agent", nil, t0)
				})
			})
		}
	}
	wg.Wait()
	for i, err := range errs[:small+1] {
		if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if got := taskKeys(t, c, "ready/", "hub"); got != 60 {
		t.Fatalf("%d dependents ready, want 60", got)
	}
	st := s.WriteStats()
	if st.Txns >= st.TaskWrites {
		t.Fatalf("%d transactions for %d writes: nothing was batched, the test proves nothing", st.Txns, st.TaskWrites)
	}
}

// Defect 1: a write that can never fit (a step whose 70 dependents need 140
// index keys) fails on its own with ErrTooManyOps, which is not retryable,
// and the unrelated writes of its batch land. Before, the whole batch
// failed with ErrUnavailable, retried for ever.
func TestWriteOverTheOperationLimitFailsAloneAndNotAsUnavailable(t *testing.T) {
	c := etcdtest.New(t).Client()
	s := store.New(c, store.WithGroupCommit(64, 1))
	if _, _, err := s.CreateTask(ctx(t), wide("hub", 0, 70)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.UpdateTask(ctx(t), "default", "hub", func(task *reevev1.Task) error {
		return taskstate.Claim(task, "hub", 1, "s1", "agent", t0)
	}); err != nil {
		t.Fatal(err)
	}
	const small = 100
	for i := range small {
		if _, _, err := s.CreateTask(ctx(t), record(fmt.Sprintf("s%03d", i))); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, small)
	var hubErr error
	for i := range small {
		wg.Go(func() {
			_, _, errs[i] = s.UpdateTask(ctx(t), "default", fmt.Sprintf("s%03d", i), func(task *reevev1.Task) error {
				return taskstate.Claim(task, "a", 1, "s1", "agent", t0)
			})
		})
		if i == small/2 {
			wg.Go(func() {
				_, _, hubErr = s.UpdateTask(ctx(t), "default", "hub", func(task *reevev1.Task) error {
					return taskstate.Complete(task, taskstate.Ref(task, taskstate.FindStep(task, "hub")), "agent", nil, t0)
				})
			})
		}
	}
	wg.Wait()
	if !errors.Is(hubErr, store.ErrTooManyOps) || errors.Is(hubErr, store.ErrUnavailable) {
		t.Fatalf("completing a step with 70 dependents: %v, want ErrTooManyOps (not ErrUnavailable)", hubErr)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("unrelated write %d: %v", i, err)
		}
	}
	v, err := s.GetTask(ctx(t), "default", "hub")
	if err != nil {
		t.Fatal(err)
	}
	if st := taskstate.FindStep(v.Record.GetTask(), "hub").GetState(); st != reevev1.StepState_STEP_STATE_RUNNING {
		t.Fatalf("hub is %v after a refused write, want still RUNNING", st)
	}
}

// Registration refuses a workflow one of whose transitions cannot fit.
func TestCheckWorkflowOps(t *testing.T) {
	s, _ := newStore(t)
	roots := func(n int) *reevev1.Workflow { return wide("x", n, 0).GetTask().GetWorkflow() }
	if err := s.CheckWorkflowOps("workflow", roots(58)); err != nil {
		t.Fatalf("58 parallel steps (128 operations): %v", err)
	}
	err := s.CheckWorkflowOps("workflow", roots(64))
	if err == nil || !strings.Contains(err.Error(), "workflow.steps") || !strings.Contains(err.Error(), "128") {
		t.Fatalf("64 parallel steps: %v, want an error naming workflow.steps and the limit", err)
	}
	chain := &reevev1.Workflow{}
	for i := range 100 {
		st := &reevev1.StepSpec{Name: fmt.Sprintf("c%02d", i), Type: "t", Compensation: &reevev1.CompensationSpec{Type: "undo"}}
		if i > 0 {
			st.DependsOn = []string{fmt.Sprintf("c%02d", i-1)}
		}
		chain.Steps = append(chain.Steps, st)
	}
	if err := s.CheckWorkflowOps("workflow", chain); err != nil {
		t.Fatalf("a 100-step chain: %v", err)
	}
	raised := store.New(s.Client(), store.WithMaxTxnOps(1024))
	if err := raised.CheckWorkflowOps("workflow", roots(64)); err != nil {
		t.Fatalf("64 parallel steps with --max-txn-ops=1024: %v", err)
	}
}

// Defect 5 (store side): the retention sweeper deleted a task's record,
// state and ended keys but left the ready and deadline keys the record
// still implied (a terminal record with a queued step, as an operator
// action could leave one): orphans in front of the supervisor's deadline
// scan and in the ready queue, for ever. It deletes every derived key.
func TestSweepEndedDeletesEveryKeyDerivedFromTheRecord(t *testing.T) {
	s, c := newStore(t)
	rec := wide("stray", 3, 0) // three queued steps: 3 ready + 3 deadline keys
	task := rec.GetTask()
	task.State = reevev1.TaskState_TASK_STATE_CANCELED
	task.EndTime = timestamppb.New(t0)
	if _, _, err := s.CreateTask(ctx(t), rec); err != nil {
		t.Fatal(err)
	}
	if r, d := taskKeys(t, c, "ready/", "stray"), taskKeys(t, c, "deadlines/", "stray"); r != 3 || d != 3 {
		t.Fatalf("setup: %d ready and %d deadline keys, want 3 and 3", r, d)
	}
	if _, _, err := s.CreateTask(ctx(t), wide("kept", 2, 0)); err != nil {
		t.Fatal(err)
	}
	n, _, _, err := s.SweepEndedFrom(ctx(t), "", t0.Add(time.Minute), 100)
	if err != nil || n != 1 {
		t.Fatalf("swept %d (%v), want 1", n, err)
	}
	for _, p := range []string{"tasks/", "ready/", "deadlines/", "created-state/", "ended/"} {
		if got := taskKeys(t, c, p, "stray"); got != 0 {
			t.Errorf("%d %s keys of the swept task left: %v", got, p, keys(t, c, p))
		}
	}
	if r, d := taskKeys(t, c, "ready/", "kept"), taskKeys(t, c, "deadlines/", "kept"); r != 2 || d != 2 {
		t.Fatalf("the live task lost keys: %d ready, %d deadline", r, d)
	}
}
