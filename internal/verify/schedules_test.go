package verify_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/verify"
)

// Schedules (issue 38): verify reports a nominal time run twice, a recent
// run whose task is gone, and a schedule overdue for its firing; a healthy
// schedule, a paused one and a trigger are not reported.
func TestVerifyChecksSchedules(t *testing.T) {
	c := etcdtest.New(t).Client()
	s := store.New(c)
	now := t0.Add(time.Hour)
	ts := timestamppb.New
	if _, _, err := s.CreateTask(ctx(t), record("sched-nightly-1")); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, paused bool, next time.Time, runs ...*reevev1.ScheduleRun) {
		t.Helper()
		sc := &reevev1.Schedule{Namespace: "default", Name: name, Paused: paused,
			Spec:   &reevev1.ScheduleSpec{Cron: "@hourly"},
			Action: &reevev1.ScheduleAction{Workflow: &reevev1.WorkflowRef{Name: "wf"}},
			Info:   &reevev1.ScheduleInfo{RecentRuns: runs, NextFireTime: ts(next)}}
		if err := s.CreateSchedule(ctx(t), sc); err != nil {
			t.Fatal(err)
		}
	}
	run := func(nominal time.Time, id, origin string) *reevev1.ScheduleRun {
		return &reevev1.ScheduleRun{NominalTime: ts(nominal), StartTime: ts(now.Add(-time.Minute)), TaskId: id, Origin: origin}
	}
	mk("nightly", false, now.Add(time.Minute), run(t0, "sched-nightly-1", "scheduled"), run(t0, "trig-nightly-1", "trigger"))
	mk("twice", false, now.Add(time.Minute), run(t0, "sched-nightly-1", "scheduled"), run(t0, "sched-nightly-1-copy", "catch-up"))
	mk("behind", false, now.Add(-time.Hour))
	mk("paused", true, now.Add(-time.Hour))

	rep, err := verify.Check(ctx(t), c, verify.Options{Now: func() time.Time { return now }, Retention: 72 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, v := range rep.Violations {
		got[v.Kind]++
	}
	if got[verify.KindScheduleRunTwice] != 1 || got[verify.KindScheduleBehind] != 1 || got[verify.KindScheduleRunLost] != 2 {
		// Lost: the trigger's task and the copy's, which were never
		// created (the trigger is not a nominal time, but its task is
		// looked for).
		t.Fatalf("violations %v, want one run twice, one behind, two lost", rep.Violations)
	}
}
