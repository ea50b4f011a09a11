package verify_test

import (
	"slices"
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
	"github.com/reeve-org/reeve/internal/verify"
)

// A task whose step waits for a completion from outside is healthy: its
// complete-by (a deadline key) moves it. A WAITING step without one, or
// in a terminal task, is reported.
func TestWaitingSteps(t *testing.T) {
	c := etcdtest.New(t).Client()
	s := store.New(c)
	wf := &reevev1.Workflow{Name: "wait", Steps: []*reevev1.StepSpec{
		{Name: "approve", WaitFor: "external", Timeout: durationpb.New(48 * time.Hour)},
	}}
	rec := func(id string) *storev1.TaskRecord {
		return &storev1.TaskRecord{Task: taskstate.New("default", id, wf, nil, t0), RequestDigest: []byte(id)}
	}
	waiting := rec("waiting")
	if !taskstate.Waiting(waiting.Task.Steps[0]) {
		t.Fatalf("step %v, want WAITING", waiting.Task.Steps[0])
	}
	stuck := rec("stuck")
	stuck.Task.Steps[0].CompleteBy = nil
	term := rec("term")
	term.Task.State, term.Task.EndTime = reevev1.TaskState_TASK_STATE_FAILED, timestamppb.New(t0)
	for _, r := range []*storev1.TaskRecord{waiting, stuck, term} {
		if _, _, err := s.CreateTask(ctx(t), r); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := verify.Check(ctx(t), c, verify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := kindsOf(rep)
	want := []string{verify.KindWedged + " stuck", verify.KindTerminalLive + " term"}
	if !slices.Equal(got, want) {
		t.Fatalf("violations %v, want %v", got, want)
	}
	// The waiting index is checked as every index: its key removed is
	// missing.
	if resp, err := c.Delete(ctx(t), "/reeve/waiting/default/", clientv3.WithPrefix()); err != nil || resp.Deleted != 2 {
		t.Fatalf("delete the waiting key: %v, %d deleted, want 2 (waiting, stuck)", err, resp.Deleted)
	}
	rep, err = verify.Check(ctx(t), c, verify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := kindsOf(rep); !slices.Contains(got, verify.KindMissing+" waiting") {
		t.Fatalf("violations %v, want the missing waiting key of task waiting", got)
	}
}
