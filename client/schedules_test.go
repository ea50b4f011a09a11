package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/client"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/schedule"
	"github.com/reeve-org/reeve/internal/testenv"
)

// A schedule made through the client fires (the supervisor leader fires
// it); each task sees its nominal time in its input, the one its id names.
func TestScheduleThroughTheClient(t *testing.T) {
	seen := make(chan string, 100)
	e := newEnv(t, map[string]agentsdk.HandlerFunc{
		"tick": func(_ context.Context, s *agentsdk.Step) (any, error) {
			var in struct {
				Region        string
				ReeveSchedule struct{ Schedule, NominalTime string }
			}
			if err := s.Input(&in); err != nil {
				return nil, agentsdk.Permanent(err)
			}
			select {
			case seen <- in.Region + " " + in.ReeveSchedule.Schedule + " " + in.ReeveSchedule.NominalTime:
			default:
			}
			return nil, nil
		},
	})
	e.env.StartSupervisor([]*testenv.Scheduler{e.s})
	e.register(t, &reevev1.Workflow{Name: "sync", Steps: []*reevev1.StepSpec{step("tick", "tick")}})

	sc, err := e.c.CreateSchedule(ctx(t), "sync", "sync", client.Every(time.Second, 0),
		client.WithScheduleInput(map[string]string{"region": "eu"}), client.WithOverlap(reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_ALLOW_ALL))
	if err != nil || len(sc.GetInfo().GetNextTimes()) != 5 {
		t.Fatalf("create: %v, %v", sc, err)
	}
	var got string
	select {
	case got = <-seen:
	case <-time.After(wait):
		t.Fatal("no scheduled task ran")
	}
	var region, name, nominal string
	if _, err := fmt.Sscan(got, &region, &name, &nominal); err != nil || region != "eu" || name != "sync" {
		t.Fatalf("a step saw %q", got)
	}
	at, err := time.Parse(time.RFC3339, nominal)
	if err != nil {
		t.Fatal(err)
	}
	task, err := e.c.GetRun(schedule.TaskID("sync", at)).Wait(ctx(t))
	if err != nil || task.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("the task of %s: %v %v", nominal, task.GetState(), err)
	}

	if _, err := e.c.PauseSchedule(ctx(t), "sync", "maintenance"); err != nil {
		t.Fatal(err)
	}
	run, skipped, err := e.c.TriggerSchedule(ctx(t), "sync")
	if err != nil || run == nil || skipped != "" {
		t.Fatalf("trigger: %v %q %v", run, skipped, err)
	}
	from := time.Now().Add(-time.Hour).Truncate(time.Second)
	bf, err := e.c.BackfillSchedule(ctx(t), "sync", from, from.Add(time.Second))
	if err != nil || len(bf.GetTaskIds()) != 2 {
		t.Fatalf("backfill: %v %v", bf, err)
	}
	list, err := e.c.ListSchedules(ctx(t))
	if err != nil || len(list) != 1 || !list[0].GetPaused() {
		t.Fatalf("list: %v %v", list, err)
	}
	if err := e.c.DeleteSchedule(ctx(t), "sync"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.GetSchedule(ctx(t), "sync"); err == nil {
		t.Fatal("a deleted schedule was found")
	}
}
