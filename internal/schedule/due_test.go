package schedule_test

import (
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/schedule"
	"github.com/reeve-org/reeve/internal/workflow"
)

func TestDueAfterAnOutage(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		spec       schedule.Spec
		last, now  time.Time
		window     time.Duration
		max        int
		wantRun    string
		wantMissed int
		wantMore   bool
		wantNext   string
	}{
		{"firer down 5 minutes, 1-minute window: the last two run, three are missed", schedule.Spec{Every: time.Minute}, t0, t0.Add(5 * time.Minute), time.Minute, 100,
			"01-01 10:04 UTC, 01-01 10:05 UTC", 3, false, "01-01 10:06 UTC"},
		{"nothing due yet", schedule.Spec{Every: time.Minute}, t0, t0.Add(59 * time.Second), time.Minute, 100,
			"", 0, false, "01-01 10:01 UTC"},
		{"cut at max, the next is already due", schedule.Spec{Every: time.Second}, t0, t0.Add(10 * time.Second), time.Minute, 3,
			"01-01 10:00 UTC, 01-01 10:00 UTC, 01-01 10:00 UTC", 0, false, "01-01 10:00 UTC"},
		{"a long outage of a 1s schedule is counted up to a bound", schedule.Spec{Every: time.Second}, t0, t0.Add(24 * time.Hour), time.Second, 100,
			"01-02 09:59 UTC, 01-02 10:00 UTC", 10_000, true, "01-02 10:00 UTC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := compile(t, tc.spec)
			p := c.Due("default", "s", tc.last, tc.now, tc.window, tc.max)
			if got := formatIn(p.Run, time.UTC); got != tc.wantRun {
				t.Errorf("run %s, want %s", got, tc.wantRun)
			}
			if p.Missed.Count != tc.wantMissed || p.Missed.More != tc.wantMore {
				t.Errorf("missed %d (more %v), want %d (more %v)", p.Missed.Count, p.Missed.More, tc.wantMissed, tc.wantMore)
			}
			if got := formatIn([]time.Time{p.Next}, time.UTC); !p.HasNext || got != tc.wantNext {
				t.Errorf("next %s (has %v), want %s", got, p.HasNext, tc.wantNext)
			}
		})
	}
}

func TestDueCoversEveryTimeOnce(t *testing.T) {
	// Planning in small steps from any moment covers each nominal time
	// exactly once: run or missed, never both, never twice.
	c := compile(t, schedule.Spec{Cron: "*/5 * * * *", Zone: "America/New_York", Jitter: 20 * time.Second})
	start := time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC)
	last := start
	end := start.Add(4 * time.Hour)
	counted := map[time.Time]int{}
	missed := 0
	for now := start; now.Before(end); now = now.Add(17 * time.Second) {
		p := c.Due("ns", "s", last, now, time.Minute, 2)
		for _, r := range p.Run {
			counted[r]++
		}
		missed += p.Missed.Count
		last = p.Last
	}
	// Every time due by the last pass was run once (the jitter is under
	// 20s, the passes 17s apart: none was missed).
	want := 0
	for _, w := range c.NextN(start, 48) {
		if w.Before(end.Add(-time.Minute)) {
			want++
			if counted[w] != 1 {
				t.Errorf("%v ran %d times, want once", w, counted[w])
			}
		}
	}
	if missed != 0 || len(counted) < want {
		t.Errorf("%d missed, %d ran, want 0 missed and at least %d ran", missed, len(counted), want)
	}
}

func TestDueWaitsForJitter(t *testing.T) {
	c := compile(t, schedule.Spec{Every: time.Minute, Jitter: 50 * time.Second})
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	j := c.Jitter("ns", "s", t0.Add(time.Minute))
	before := c.Due("ns", "s", t0, t0.Add(time.Minute+j-time.Nanosecond), time.Minute, 10)
	at := c.Due("ns", "s", t0, t0.Add(time.Minute+j), time.Minute, 10)
	if len(before.Run) != 0 || !before.Fire.Equal(t0.Add(time.Minute+j)) || len(at.Run) != 1 {
		t.Fatalf("jitter %v: before its firing time %d run (fire %v), at it %d", j, len(before.Run), before.Fire, len(at.Run))
	}
}

func TestOverlapDecide(t *testing.T) {
	for _, tc := range []struct {
		policy   string
		running  bool
		buffered int
		want     schedule.Action
	}{
		{"skip", false, 0, schedule.ActionStart},
		{"skip", true, 0, schedule.ActionSkip},
		{"", true, 0, schedule.ActionSkip},
		{"buffer_one", true, 0, schedule.ActionBuffer},
		{"buffer_one", true, 1, schedule.ActionSkip},
		{"buffer_one", false, 1, schedule.ActionSkip},
		{"buffer_all", true, 5, schedule.ActionBuffer},
		{"buffer_all", false, 5, schedule.ActionBuffer},
		{"buffer_all", true, schedule.MaxBuffered, schedule.ActionSkip},
		{"cancel_other", true, 0, schedule.ActionCancelAndStart},
		{"cancel_other", false, 0, schedule.ActionStart},
		{"allow_all", true, 0, schedule.ActionStart},
		{"Allow-All", true, 3, schedule.ActionStart},
	} {
		p, err := schedule.ParseOverlap(tc.policy)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Decide(tc.running, tc.buffered); got != tc.want {
			t.Errorf("%s running=%v buffered=%d: %v, want %v", tc.policy, tc.running, tc.buffered, got, tc.want)
		}
	}
	if _, err := schedule.ParseOverlap("terminate"); err == nil {
		t.Error("an unknown policy was accepted")
	}
}

func TestTaskIDs(t *testing.T) {
	name := "a-very-long.schedule_name-that-uses-all-63-characters-allowed-x"
	at := time.Date(2026, 11, 29, 3, 42, 7, 0, time.FixedZone("X", 3600))
	id := schedule.TaskID(name, at)
	if id != "sched-"+name+"-20261129T024207Z" {
		t.Fatalf("id %s", id)
	}
	if err := workflow.ValidateTaskID("task_id", id); err != nil {
		t.Fatalf("derived id is not a valid task id: %v", err)
	}
	if err := workflow.ValidateTaskID("task_id", schedule.TriggerTaskID(name, at)); err != nil {
		t.Fatalf("trigger id is not a valid task id: %v", err)
	}
	gotName, gotAt, err := schedule.ParseTaskID(id)
	if err != nil || gotName != name || !gotAt.Equal(at) {
		t.Fatalf("parse %s: %s %v %v", id, gotName, gotAt, err)
	}
	if _, _, err := schedule.ParseTaskID("sched-x-2026"); err == nil {
		t.Fatal("a malformed id parsed")
	}
}

func TestPassedCountsWhatAPauseLetPass(t *testing.T) {
	c := compile(t, schedule.Spec{Every: time.Minute})
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	m := c.Passed("ns", "s", t0, t0.Add(5*time.Minute))
	if m.Count != 5 || !m.First.Equal(t0.Add(time.Minute)) || !m.Last.Equal(t0.Add(5*time.Minute)) {
		t.Fatalf("passed %+v, want 10:01-10:05 (5)", m)
	}
}
