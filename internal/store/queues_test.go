package store_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// A max_running slot is a key derived from the record: a claim that takes
// a slot another attempt holds writes nothing (ErrSlotTaken), or, through
// UpdateTaskClaiming, runs its transition again without the slot; no
// claim takes a slot while one above its limit is held; the write that
// ends the attempt frees it.
func TestSlotKeys(t *testing.T) {
	s, c := newStore(t)
	wf := &reevev1.Workflow{Steps: []*reevev1.StepSpec{{Name: "a", Type: "t", Timeout: durationpb.New(time.Minute)}}}
	for _, id := range []string{"x", "y", "z"} {
		if _, _, err := s.CreateTask(ctx(t), &storev1.TaskRecord{Task: taskstate.New("default", id, wf, nil, t0), RequestDigest: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(id string, slot, limit int32) func(*reevev1.Task) error {
		return func(task *reevev1.Task) error {
			if err := taskstate.Claim(task, "a", 1, "s1", "agent", t0); err != nil {
				return err
			}
			st := taskstate.FindStep(task, "a")
			st.Slot, st.SlotLimit = slot, limit
			return nil
		}
	}
	if _, _, err := s.UpdateTask(ctx(t), "default", "x", claim("x", 1, 2)); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, c, "slots/"); len(got) != 1 || got[0] != "/reeve/slots/default/t/000001" {
		t.Fatalf("slot keys %v", got)
	}
	// y takes x's slot: refused, nothing written.
	if _, _, err := s.UpdateTask(ctx(t), "default", "y", claim("y", 1, 2)); !errors.Is(err, store.ErrSlotTaken) {
		t.Fatalf("second claim of slot 1: %v; want ErrSlotTaken", err)
	}
	// Through UpdateTaskClaiming: run again, without the slot (here: no claim).
	lost := false
	_, after, err := s.UpdateTaskClaiming(ctx(t), "default", "y", func(task *reevev1.Task) error {
		if lost {
			return nil
		}
		return claim("y", 1, 2)(task)
	}, func() { lost = true })
	if err != nil || !lost || !taskstate.Queued(taskstate.FindStep(after.GetTask(), "a")) {
		t.Fatalf("claiming write: %v, lost %t; want it written without the claim", err, lost)
	}
	// No claim under a limit while a slot above it is held: y takes slot 3
	// under limit 3, then z's claim of slot 2 under limit 2 is refused.
	if _, _, err := s.UpdateTask(ctx(t), "default", "y", claim("y", 3, 3)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.UpdateTask(ctx(t), "default", "z", claim("z", 2, 2)); !errors.Is(err, store.ErrSlotTaken) {
		t.Fatalf("claim under limit 2 with slot 3 held: %v; want ErrSlotTaken", err)
	}
	// x ends: its slot is freed.
	if _, _, err := s.UpdateTask(ctx(t), "default", "x", func(task *reevev1.Task) error {
		return taskstate.Complete(task, taskstate.Ref(task, taskstate.FindStep(task, "a")), "agent", nil, t0.Add(time.Second))
	}); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, c, "slots/"); len(got) != 1 || got[0] != "/reeve/slots/default/t/000003" {
		t.Fatalf("slot keys after x ended %v; want y's only", got)
	}
}
