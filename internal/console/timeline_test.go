package console

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
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

// Waits are spans too: a wait for approval to its complete-by (the step's
// timeout), a sleep to its end, an agent's hand-off from the deferral on;
// an open wait does not stretch the chart to its complete-by, and a
// completion from outside is a decision.
func TestTimelineWaits(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	ev := func(ms int, kind, step string, attempt int32, actor string) *reevev1.HistoryEvent {
		return &reevev1.HistoryEvent{Time: timestamppb.New(t0.Add(time.Duration(ms) * time.Millisecond)), Kind: kind, Step: step, Attempt: attempt, Actor: actor}
	}
	task := &reevev1.Task{
		State:      reevev1.TaskState_TASK_STATE_RUNNING,
		CreateTime: timestamppb.New(t0),
		Workflow: &reevev1.Workflow{Steps: []*reevev1.StepSpec{
			{Name: "ok", WaitFor: "external", Timeout: durationpb.New(2 * time.Hour)},
			{Name: "nap", Sleep: durationpb.New(time.Hour), DependsOn: []string{"ok"}},
			{Name: "pay", Type: "x", DependsOn: []string{"ok"}, Timeout: durationpb.New(time.Hour)},
		}},
		History: []*reevev1.HistoryEvent{
			ev(0, "step.waiting", "ok", 1, "scheduler"),
			ev(100, "step.succeeded", "ok", 1, "approver/ann"),
			ev(110, "step.sleeping", "nap", 1, "scheduler"),
			ev(120, "step.dispatched", "pay", 1, "scheduler/s1"),
			ev(130, "step.deferred", "pay", 1, "agent/ag1"),
		},
	}
	task.History[3].Message = "agent ag1"
	spans, markers := timeline(task, t0.Add(time.Second))
	want := []struct {
		step, agent, outcome string
		wait                 bool
		startMs, endMs       int
		by                   time.Duration
	}{
		{"ok", "approval", "succeeded", true, 0, 100, 2 * time.Hour},
		{"nap", "sleep", "waiting", true, 110, 1000, time.Hour},
		{"pay", "ag1", "deferred", false, 120, 130, time.Hour},
		{"pay", "handed off", "waiting", true, 130, 1000, time.Hour - 10*time.Millisecond},
	}
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d: %+v", len(spans), len(want), spans)
	}
	for i, w := range want {
		s := spans[i]
		if s.Step != w.step || s.Agent != w.agent || s.Outcome != w.outcome || s.Wait != w.wait ||
			!s.Start.Equal(t0.Add(time.Duration(w.startMs)*time.Millisecond)) || !s.End.Equal(t0.Add(time.Duration(w.endMs)*time.Millisecond)) ||
			s.CompleteBy.Sub(s.Start) != w.by {
			t.Errorf("span %d: %+v, want %+v", i, s, w)
		}
	}
	if len(markers) != 1 || markers[0].Actor != "approver/ann" {
		t.Errorf("markers %+v, want the approval", markers)
	}
	svg := string(timelineSVG(spans, markers, t0, t0.Add(time.Second)))
	if !strings.Contains(svg, "sleep · by 11:00") || !strings.Contains(svg, ">+1s<") || !strings.Contains(svg, "ok attempt 1 (approval)") {
		t.Errorf("svg: want the sleep's end in its label and an axis of 1s, got %s", svg)
	}
}
