package console

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// The timeline rebuilds one span per execution from the history: each
// closed by its own outcome, an execution taken back without a known event
// closed by the next dispatch, compensations apart from attempts.
func TestTimelineSpans(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	ev := func(ms int, kind, step string, attempt int32, msg string) *reevev1.HistoryEvent {
		return &reevev1.HistoryEvent{Time: timestamppb.New(t0.Add(time.Duration(ms) * time.Millisecond)), Kind: kind, Step: step, Attempt: attempt, Actor: "scheduler/s1", Message: msg}
	}
	task := &reevev1.Task{
		State:      reevev1.TaskState_TASK_STATE_COMPENSATED,
		CreateTime: timestamppb.New(t0),
		EndTime:    timestamppb.New(t0.Add(time.Second)),
		Workflow: &reevev1.Workflow{Steps: []*reevev1.StepSpec{
			{Name: "a", Type: "x"}, {Name: "b", Type: "y", DependsOn: []string{"a"}},
		}},
		History: []*reevev1.HistoryEvent{
			ev(0, "step.dispatched", "a", 1, "agent ag1"),
			ev(10, "step.unacknowledged", "a", 1, "not acknowledged"),
			ev(20, "step.dispatched", "a", 2, "agent ag2"),
			ev(30, "step.dispatched", "a", 3, "agent ag3"), // attempt 2 taken back silently
			ev(40, "step.succeeded", "a", 3, ""),
			ev(50, "step.dispatched", "b", 1, "agent ag1"),
			ev(60, "step.failed", "b", 1, "boom"),
			ev(70, "task.compensating", "", 0, "b failed"),
			ev(80, "compensation.dispatched", "a", 4, "agent ag1"),
			ev(90, "compensation.succeeded", "a", 4, ""),
		},
	}
	spans, markers := timeline(task, t0.Add(time.Hour))
	want := []struct {
		step     string
		attempt  int32
		comp     bool
		agent    string
		outcome  string
		startMs  int
		endMs    int
		byMillis int // complete-by after start (the default timeout)
	}{
		{"a", 1, false, "ag1", "unacknowledged", 0, 10, 60000},
		{"a", 2, false, "ag2", "superseded", 20, 30, 60000},
		{"a", 3, false, "ag3", "succeeded", 30, 40, 60000},
		{"b", 1, false, "ag1", "failed", 50, 60, 60000},
		{"a", 4, true, "ag1", "succeeded", 80, 90, 60000},
	}
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d: %+v", len(spans), len(want), spans)
	}
	for i, w := range want {
		s := spans[i]
		if s.Step != w.step || s.Attempt != w.attempt || s.Compensation != w.comp || s.Agent != w.agent || s.Outcome != w.outcome ||
			!s.Start.Equal(t0.Add(time.Duration(w.startMs)*time.Millisecond)) || !s.End.Equal(t0.Add(time.Duration(w.endMs)*time.Millisecond)) ||
			s.CompleteBy.Sub(s.Start) != time.Duration(w.byMillis)*time.Millisecond {
			t.Errorf("span %d: %+v, want %+v", i, s, w)
		}
	}
	kinds := map[string]bool{}
	for _, m := range markers {
		kinds[m.Kind] = true
	}
	for _, k := range []string{"step.unacknowledged", "task.compensating"} {
		if !kinds[k] {
			t.Errorf("no decision marker for %s", k)
		}
	}
}
