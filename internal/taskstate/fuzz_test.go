package taskstate_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// FuzzResultFencing applies arbitrary results (step, attempt, agent,
// outcome) to a task whose "charge" step runs attempt 1 on agent "a": only
// that exact execution may change the task; any other result is refused and
// leaves the task byte for byte as it was.
func FuzzResultFencing(f *testing.F) {
	f.Add("charge", int32(1), "a", true, "")
	f.Add("charge", int32(2), "a", true, "")
	f.Add("charge", int32(1), "b", false, "boom")
	f.Add("reserve", int32(1), "a", true, "")
	f.Add("ship", int32(0), "a", false, "")
	f.Add("", int32(-1), "", true, "")
	f.Fuzz(func(t *testing.T, step string, attempt int32, agent string, ok bool, msg string) {
		task := taskstate.New("default", "t1", orders(), nil, t0)
		run(t, task, "reserve", t0)
		if err := taskstate.Complete(task, taskstate.Ref(task, taskstate.FindStep(task, "reserve")), "a", nil, t0); err != nil {
			t.Fatal(err)
		}
		run(t, task, "charge", t0) // charge: attempt 1, agent "a"
		before := proto.Clone(task).(*reevev1.Task)

		ref := &reevev1.StepRef{Namespace: "default", TaskId: "t1", Step: step, Attempt: attempt}
		var err error
		if ok {
			err = taskstate.Complete(task, ref, agent, nil, t0)
		} else {
			err = taskstate.Fail(task, ref, agent, &reevev1.StepError{Message: msg}, t0)
		}
		holder := step == "charge" && attempt == 1 && agent == "a"
		switch {
		case holder && err != nil:
			t.Fatalf("the holder's result was refused: %v", err)
		case !holder && err == nil:
			t.Fatalf("result (%q, %d, %q) accepted; only (charge, 1, a) may change the task", step, attempt, agent)
		case !holder && !proto.Equal(before, task):
			t.Fatalf("refused result (%q, %d, %q) changed the task", step, attempt, agent)
		}
	})
}
