package supervisor_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/schedule"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/supervisor"
)

// scheduleTasks returns the tasks of schedule name (at most 1,000).
func scheduleTasks(t *testing.T, c reevev1.SchedulerServiceClient, name string) []*reevev1.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{TaskIdPrefix: "sched-" + name + "-", PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetTasks()
}

// scheduledTimes returns the nominal times of schedule name's tasks,
// sorted, from their ids.
func scheduledTimes(t *testing.T, c reevev1.SchedulerServiceClient, name string) []time.Time {
	t.Helper()
	var out []time.Time
	for _, tk := range scheduleTasks(t, c, name) {
		n, at, err := schedule.ParseTaskID(tk.GetId())
		if err != nil || n != name {
			t.Fatalf("task %s: not of schedule %s (%v)", tk.GetId(), name, err)
		}
		out = append(out, at)
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// unstartedBy returns the tasks of schedule name whose nominal time is at
// or before by and that have not started (they wait for their start time:
// fired ahead, not started yet); it fails the test on a run that was
// canceled (no pause or delete here).
func unstartedBy(t *testing.T, c reevev1.SchedulerServiceClient, name string, by time.Time) []string {
	t.Helper()
	var out []string
	for _, tk := range scheduleTasks(t, c, name) {
		if tk.GetState() == reevev1.TaskState_TASK_STATE_CANCELED {
			t.Fatalf("task %s was canceled", tk.GetId())
		}
		_, at, err := schedule.ParseTaskID(tk.GetId())
		if err != nil {
			t.Fatal(err)
		}
		if _, waits := taskstate.AwaitingStart(tk); waits && !at.After(by) {
			out = append(out, tk.GetId())
		}
	}
	return out
}

// The firer changes while a schedule fires every second: its leader is
// killed (a crash: its session lapses), or deposed while it still runs
// (its election key deleted: it keeps firing until a refusal tells it).
// Counted from the tasks' ids, no second between the first run and the
// last was missed, and none ran twice.
func TestScheduleFailoverMissesNoTimeAndRunsNoneTwice(t *testing.T) {
	for _, how := range []string{"killed", "deposed"} {
		t.Run(how, func(t *testing.T) {
			env := testenv.New(t)
			s := env.StartScheduler("")
			c := s.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			if _, err := c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{Name: "job", Steps: []*reevev1.StepSpec{step("a", "t", time.Minute)}}}); err != nil {
				t.Fatal(err)
			}
			first := env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithID("first"))
			waitFor(t, "a leader", first.Leading)
			second := env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithID("second"))
			sc := reevev1.NewScheduleServiceClient(testenv.Dial(t, s.Addr))
			// allow_all: the tasks (no agent runs them) stay pending, and
			// every time starts.
			if _, err := sc.CreateSchedule(ctx, &reevev1.CreateScheduleRequest{Schedule: &reevev1.Schedule{Name: "tick",
				Spec:     &reevev1.ScheduleSpec{Every: durationpb.New(time.Second)},
				Action:   &reevev1.ScheduleAction{Workflow: &reevev1.WorkflowRef{Name: "job"}},
				Policies: &reevev1.SchedulePolicies{Overlap: reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_ALLOW_ALL}}}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "3 runs", func() bool { return len(scheduledTimes(t, c, "tick")) >= 3 })
			switch how {
			case "killed":
				first.Kill()
			case "deposed":
				deleteElectionKey(t, env.Etcd.Client(), "first")
			}
			changed := time.Now()
			waitFor(t, "the second supervisor to lead", second.Leading)
			waitFor(t, "runs 3s after the change", func() bool {
				ts := scheduledTimes(t, c, "tick")
				return ts[len(ts)-1].After(changed.Add(3 * time.Second))
			})
			// Fired ahead, each run also starts: by the leader's timer.
			waitFor(t, "every run up to 3s after the change started", func() bool {
				return len(unstartedBy(t, c, "tick", changed.Add(3*time.Second))) == 0
			})
			first.Stop()
			second.Stop()
			ts := scheduledTimes(t, c, "tick")
			for i := 1; i < len(ts); i++ {
				if d := ts[i].Sub(ts[i-1]); d != time.Second {
					t.Errorf("runs at %v and then %v: %v apart, want 1s (a time missed)", ts[i-1], ts[i], d)
				}
			}
			got, err := sc.GetSchedule(ctx, &reevev1.GetScheduleRequest{Name: "tick"})
			if err != nil {
				t.Fatal(err)
			}
			if n := got.GetSchedule().GetInfo().GetRunCount(); n != int64(len(ts)) {
				t.Errorf("the schedule counts %d runs, %d tasks exist: a time ran twice or a run was lost", n, len(ts))
			}
			t.Logf("%d runs from %v to %v", len(ts), ts[0].Format(time.TimeOnly), ts[len(ts)-1].Format(time.TimeOnly))
		})
	}
}

// deleteElectionKey deposes the supervisor id: its election key goes,
// while it still runs.
func deleteElectionKey(t *testing.T, cli *clientv3.Client, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := cli.Get(ctx, "/reeve/supervisor/election/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if string(kv.Value) == id {
			if _, err := cli.Delete(ctx, string(kv.Key)); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no election key of %s", id)
}

// Exactly once under chaos: three supervisors, and every 0.3 to 2 s the
// leader is killed (restarted at once as a follower) or deposed while it
// runs, for 15 s, while a schedule fires every second. Counted from the
// tasks' ids: no second between the first run and the last is missing
// (every outage is far inside the 1-minute catch-up window), and the
// schedule counts as many runs as there are tasks.
func TestScheduleFirerChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("15 s of chaos")
	}
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{Name: "job", Steps: []*reevev1.StepSpec{step("a", "t", time.Minute)}}}); err != nil {
		t.Fatal(err)
	}
	sups := map[string]*testenv.Supervisor{}
	start := func(id string) { sups[id] = env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithID(id)) }
	for _, id := range []string{"s0", "s1", "s2"} {
		start(id)
	}
	sc := reevev1.NewScheduleServiceClient(testenv.Dial(t, s.Addr))
	if _, err := sc.CreateSchedule(ctx, &reevev1.CreateScheduleRequest{Schedule: &reevev1.Schedule{Name: "tick",
		Spec:     &reevev1.ScheduleSpec{Every: durationpb.New(time.Second)},
		Action:   &reevev1.ScheduleAction{Workflow: &reevev1.WorkflowRef{Name: "job"}},
		Policies: &reevev1.SchedulePolicies{Overlap: reevev1.ScheduleOverlapPolicy_SCHEDULE_OVERLAP_POLICY_ALLOW_ALL}}}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 38))
	end := time.Now().Add(15 * time.Second)
	kills, deposals := 0, 0
	for time.Now().Before(end) {
		time.Sleep(time.Duration(300+rng.IntN(1700)) * time.Millisecond)
		id := electionLeader(t, env.Etcd.Client()) // the oldest candidate: "" between leaders
		if id == "" {
			continue
		}
		if rng.IntN(2) == 0 {
			sups[id].Kill()
			start(id) // back at once, as a follower
			kills++
		} else {
			deleteElectionKey(t, env.Etcd.Client(), id)
			deposals++
		}
	}
	// Let the last leader catch up, then stop everything.
	changed := time.Now()
	waitFor(t, "runs 3s after the last change", func() bool {
		ts := scheduledTimes(t, c, "tick")
		return len(ts) > 0 && ts[len(ts)-1].After(changed.Add(3*time.Second))
	})
	waitFor(t, "every run up to 3s after the last change started", func() bool {
		return len(unstartedBy(t, c, "tick", changed.Add(3*time.Second))) == 0
	})
	for _, sup := range sups {
		sup.Stop()
	}
	ts := scheduledTimes(t, c, "tick")
	for i := 1; i < len(ts); i++ {
		if d := ts[i].Sub(ts[i-1]); d != time.Second {
			t.Errorf("runs at %v and then %v: %v apart, want 1s (a time missed)", ts[i-1], ts[i], d)
		}
	}
	got, err := sc.GetSchedule(ctx, &reevev1.GetScheduleRequest{Name: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	if n := got.GetSchedule().GetInfo().GetRunCount(); n != int64(len(ts)) {
		t.Errorf("the schedule counts %d runs, %d tasks exist", n, len(ts))
	}
	t.Logf("%d kills, %d deposals; %d runs from %v to %v, none missed", kills, deposals, len(ts), ts[0].Format(time.TimeOnly), ts[len(ts)-1].Format(time.TimeOnly))
}

// electionLeader is the id of the oldest election candidate (the leader),
// "" when there is none.
func electionLeader(t *testing.T, cli *clientv3.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := cli.Get(ctx, "/reeve/supervisor/election/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}
