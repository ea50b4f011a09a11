package verify_test

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Tasks held by timers (issue 35) are not wedged: a sleeping step, a task
// waiting to start, a task with a deadline; their keys are what the records
// imply.
func TestTimersAreNotWedged(t *testing.T) {
	c := etcdtest.New(t).Client()
	s := store.New(c)
	wf := &reevev1.Workflow{Name: "nap", TaskTimeout: durationpb.New(time.Hour), Steps: []*reevev1.StepSpec{
		{Name: "nap", Sleep: durationpb.New(time.Minute)},
		{Name: "b", Type: "t", DependsOn: []string{"nap"}},
	}}
	for id, start := range map[string]time.Time{"sleeping": {}, "later": t0.Add(time.Hour)} {
		task := taskstate.NewAt("default", id, wf, nil, t0, start, 0)
		if _, _, err := s.CreateTask(ctx(t), &storev1.TaskRecord{Task: task, RequestDigest: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	rep := check(t, c)
	if !rep.OK() || rep.Tasks != 2 {
		var b bytes.Buffer
		_ = rep.WriteText(&b)
		t.Fatalf("timers: %s", b.String())
	}
}
