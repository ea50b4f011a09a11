package verify_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/verify"
)

// limit_exceeded is judged from the attempt history: an attempt of a type
// with max_running 2 that started while 2 ran is reported; one that
// started when another had ended is not, nor are starts before the limit
// was set.
func TestLimitExceededFromHistory(t *testing.T) {
	m := etcdtest.New(t)
	s := store.New(m.Client())
	if _, err := s.UpdateQueueConfig(ctx(t), "default", "t", func(c *reevev1.QueueConfig) error {
		c.MaxRunning, c.UpdateTime = 2, timestamppb.New(t0.Add(time.Second))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	claim := func(id string, at time.Duration) {
		t.Helper()
		if _, _, err := s.UpdateTask(ctx(t), "default", id, func(task *reevev1.Task) error {
			return taskstate.Claim(task, "a", 1, "s1", "agent", t0.Add(at))
		}); err != nil {
			t.Fatal(err)
		}
	}
	finish := func(id string, at time.Duration) {
		t.Helper()
		if _, _, err := s.UpdateTask(ctx(t), "default", id, func(task *reevev1.Task) error {
			return taskstate.Complete(task, taskstate.Ref(task, taskstate.FindStep(task, "a")), "agent", nil, t0.Add(at))
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 6 {
		if _, _, err := s.CreateTask(ctx(t), record(fmt.Sprintf("t%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// Before the limit was set: 3 at once, not judged.
	claim("t0", 0)
	claim("t1", 0)
	claim("t2", 500*time.Millisecond)
	finish("t0", 2*time.Second)
	finish("t1", 2*time.Second)
	finish("t2", 2*time.Second)
	// After: t3 and t4 run; t5 starts when t3 ended (fine), then... t3
	// ends at 4s and t5 starts at 4s (ends first at equal times).
	claim("t3", 3*time.Second)
	claim("t4", 3*time.Second)
	finish("t3", 4*time.Second)
	claim("t5", 4*time.Second)
	rep, err := verify.Check(ctx(t), m.Client(), verify.Options{Now: func() time.Time { return t0.Add(time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations {
		if v.Kind == verify.KindLimitExceeded {
			t.Errorf("unexpected %v", v)
		}
	}
	// A third while t4 and t5 run: reported.
	if _, _, err := s.CreateTask(ctx(t), record("t6")); err != nil {
		t.Fatal(err)
	}
	claim("t6", 5*time.Second)
	rep, err = verify.Check(ctx(t), m.Client(), verify.Options{Now: func() time.Time { return t0.Add(time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	var got []verify.Violation
	for _, v := range rep.Violations {
		if v.Kind == verify.KindLimitExceeded {
			got = append(got, v)
		}
	}
	if len(got) != 1 || got[0].TaskID != "t6" {
		t.Fatalf("limit violations %v; want one, of t6", got)
	}
	t.Log(got[0].Detail)
}

// A slot key no record implies (left by a scheduler of an older Reeve, or
// written by hand) holds capacity for ever: it is reported.
func TestOrphanSlotKeyReported(t *testing.T) {
	m := etcdtest.New(t)
	if _, err := m.Client().Put(ctx(t), "/reeve/slots/default/t/000001", "gone/a/1"); err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Check(ctx(t), m.Client(), verify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) != 1 || rep.Violations[0].Kind != verify.KindOrphan || rep.Violations[0].TaskID != "gone" {
		t.Fatalf("violations %v; want the orphan slot key", rep.Violations)
	}
}

// Event times are taken before their writes commit: an attempt that took
// the slot another freed can have a start a moment before that one's end.
// Two holders of one slot never ran at once, so they count once; a start
// on another slot while the limit's attempts run is still reported.
func TestLimitExceededCountsOneSlotOnce(t *testing.T) {
	m := etcdtest.New(t)
	s := store.New(m.Client())
	if _, err := s.UpdateQueueConfig(ctx(t), "default", "t", func(c *reevev1.QueueConfig) error {
		c.MaxRunning, c.UpdateTime = 1, timestamppb.New(t0.Add(time.Second))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	update := func(id string, fn func(*reevev1.Task) error) {
		t.Helper()
		if _, _, err := s.UpdateTask(ctx(t), "default", id, fn); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(id string, at time.Duration, slot int32) {
		t.Helper()
		update(id, func(task *reevev1.Task) error {
			if err := taskstate.Claim(task, "a", 1, "s1", "agent", t0.Add(at)); err != nil {
				return err
			}
			h := task.GetHistory()
			h[len(h)-1].Slot = slot
			return nil
		})
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, _, err := s.CreateTask(ctx(t), record(id)); err != nil {
			t.Fatal(err)
		}
	}
	claim("a", 3*time.Second, 1)
	update("a", func(task *reevev1.Task) error {
		return taskstate.Complete(task, taskstate.Ref(task, taskstate.FindStep(task, "a")), "agent", nil, t0.Add(4*time.Second))
	})
	claim("b", 4*time.Second-time.Millisecond, 1) // stamped before a's end, committed after it
	check := func() []verify.Violation {
		t.Helper()
		rep, err := verify.Check(ctx(t), m.Client(), verify.Options{Now: func() time.Time { return t0.Add(time.Minute) }})
		if err != nil {
			t.Fatal(err)
		}
		var got []verify.Violation
		for _, v := range rep.Violations {
			if v.Kind == verify.KindLimitExceeded {
				got = append(got, v)
			}
		}
		return got
	}
	if got := check(); len(got) != 0 {
		t.Fatalf("limit violations %v; want none: a and b held the same slot", got)
	}
	claim("c", 5*time.Second, 2)
	if got := check(); len(got) != 1 || got[0].TaskID != "c" {
		t.Fatalf("limit violations %v; want one, of c", got)
	}
}
