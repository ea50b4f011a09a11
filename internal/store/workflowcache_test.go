package store_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

func orders(typ string) *reevev1.Workflow {
	return &reevev1.Workflow{Namespace: "default", Name: "orders", Steps: []*reevev1.StepSpec{{Name: "a", Type: typ, Timeout: durationpb.New(time.Minute)}}}
}

func recordOf(id string, wf *reevev1.Workflow) *storev1.TaskRecord {
	return &storev1.TaskRecord{Task: taskstate.New("default", id, wf, nil, t0), RequestDigest: []byte(id)}
}

// A store that cached version 1 as the latest creates no task on it once
// another store registered version 2: the create's workflow compare fails,
// nothing is written, and the next lookup reads version 2. Concurrent
// creates on one version share transactions (the same compare in many
// nested transactions of one batch is allowed).
func TestCreateTaskOfLatestRefusesAStaleVersion(t *testing.T) {
	a, c := newStore(t)
	b := store.New(c)
	if _, _, err := a.PutWorkflow(ctx(t), orders("v1"), workflow.Fingerprint); err != nil {
		t.Fatal(err)
	}
	wf, latest, err := a.WorkflowForSubmit(ctx(t), "default", "orders", 0)
	if err != nil || !latest || wf.GetVersion() != 1 {
		t.Fatalf("cached latest: v%d latest=%v %v, want v1 from the cache", wf.GetVersion(), latest, err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 64)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, _, err := a.WorkflowForSubmit(ctx(t), "default", "orders", 0)
			if err == nil {
				_, _, err = a.CreateTaskOfLatest(ctx(t), recordOf(fmt.Sprintf("ok%d", i), w))
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent creates on the latest version: %v", err)
	}
	if _, _, err := b.PutWorkflow(ctx(t), orders("v2"), workflow.Fingerprint); err != nil {
		t.Fatal(err)
	}
	_, _, err = a.CreateTaskOfLatest(ctx(t), recordOf("stale", wf))
	if !errors.Is(err, store.ErrStaleWorkflow) {
		t.Fatalf("create on v1 after v2 was registered: %v, want ErrStaleWorkflow", err)
	}
	if _, err := a.GetTask(ctx(t), "default", "stale"); !store.IsNotFound(err) {
		t.Fatalf("the refused create wrote the task: %v", err)
	}
	if got := keys(t, c, "created-state/default/"); len(got) != len(errs) {
		t.Fatalf("%d created keys, want %d (the refused create wrote an index key)", len(got), len(errs))
	}
	wf, latest, err = a.WorkflowForSubmit(ctx(t), "default", "orders", 0)
	if err != nil || latest || wf.GetVersion() != 2 {
		t.Fatalf("after the refusal: v%d latest=%v %v, want v2 read from etcd", wf.GetVersion(), latest, err)
	}
	// A pinned version is served as registered, and is a copy: changing it
	// changes nothing for the next caller.
	v1, latest, err := a.WorkflowForSubmit(ctx(t), "default", "orders", 1)
	if err != nil || latest || v1.GetSteps()[0].GetType() != "v1" {
		t.Fatalf("pinned v1: %v latest=%v %v", v1, latest, err)
	}
	v1.Steps[0].Type = "changed"
	if again, _, _ := a.WorkflowForSubmit(ctx(t), "default", "orders", 1); again.GetSteps()[0].GetType() != "v1" {
		t.Fatalf("the cached version was changed through a returned copy: %q", again.GetSteps()[0].GetType())
	}
	for _, v := range []int32{0, 3} {
		if _, _, err := a.WorkflowForSubmit(ctx(t), "default", "nope", v); !store.IsNotFound(err) {
			t.Fatalf("unknown workflow, version %d: %v, want not found", v, err)
		}
	}
	if _, _, err := a.WorkflowForSubmit(ctx(t), "default", "orders", 3); !store.IsNotFound(err) {
		t.Fatalf("unknown version 3: %v, want not found", err)
	}
}
