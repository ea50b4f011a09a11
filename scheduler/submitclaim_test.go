package scheduler_test

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// recordVersion is how many times the task's record was written (etcd's
// version of its key: 1 after the create).
func recordVersion(t *testing.T, env *testenv.Env, id string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := env.Etcd.Client().Get(ctx, "/reeve/tasks/default/"+id)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("record of %s: %v, %d keys", id, err, len(resp.Kvs))
	}
	return resp.Kvs[0].Version
}

func readyKeys(t *testing.T, env *testenv.Env) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := env.Etcd.Client().Get(ctx, "/reeve/ready/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// With an idle agent, a one-step task costs two record writes (created
// claimed, then completed) instead of three, and its step never enters the
// ready queue. A duplicate submission (same id and request) releases the
// agent capacity it reserved: the next task is claimed on submit too.
func TestSubmitClaimsForAnIdleAgent(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a1", 2, "echo"))
	req := &reevev1.SubmitTaskRequest{TaskId: "t1", Workflow: inline(step("only", "echo"))}
	if task := submit(t, c, req); task.GetState() != reevev1.TaskState_TASK_STATE_RUNNING || stepOf(task, "only").GetLockedByAgent() != "a1" {
		t.Fatalf("submitted: %v, step locked by %q; want RUNNING on a1", task.GetState(), stepOf(task, "only").GetLockedByAgent())
	}
	if v, r := recordVersion(t, env, "t1"), readyKeys(t, env); v != 1 || r != 0 {
		t.Fatalf("after submit: record written %d times, %d ready keys; want 1 and 0", v, r)
	}
	if again := submit(t, c, req); again.GetId() != "t1" {
		t.Fatalf("duplicate submission: %v", again)
	}
	if task := submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "t2", Workflow: inline(step("only", "echo"))}); task.GetState() != reevev1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("t2: %v, want RUNNING: the duplicate submission kept the capacity it reserved", task.GetState())
	}
	for range 2 {
		as := agent.NextAssignment(wait)
		if ack := agent.Succeed(as.GetRef(), nil); !ack.GetAccepted() {
			t.Fatalf("result of %s refused: %v", as.GetRef().GetTaskId(), ack)
		}
	}
	for _, id := range []string{"t1", "t2"} {
		if final := testenv.WaitTask(t, c, "default", id, wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
			t.Fatalf("%s: %v", id, final.GetState())
		}
		if v := recordVersion(t, env, id); v != 2 {
			t.Fatalf("%s: record written %d times, want 2 (claimed on submit, completed)", id, v)
		}
	}
}

// A full agent, or the option off, leaves the step to the ready queue: the
// task is created PENDING and claimed by a second write.
func TestSubmitQueuesWhenNoAgentHasRoom(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []scheduler.Option
		busy bool
	}{
		{name: "agent full", busy: true},
		{name: "option off", opts: []scheduler.Option{scheduler.WithDispatchOnSubmit(false)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testenv.New(t)
			s := env.StartScheduler("", tc.opts...)
			c := s.Client(t)
			agent := testenv.ConnectRaw(t, s.Addr, register("a1", 1, "echo"))
			var first *reevev1.StepAssignment
			if tc.busy {
				submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "busy", Workflow: inline(step("only", "echo"))})
				first = agent.NextAssignment(wait)
			}
			task := submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "t1", Workflow: inline(step("only", "echo"))})
			if task.GetState() != reevev1.TaskState_TASK_STATE_PENDING {
				t.Fatalf("submitted: %v, want PENDING", task.GetState())
			}
			if first != nil {
				if ack := agent.Succeed(first.GetRef(), nil); !ack.GetAccepted() {
					t.Fatalf("result refused: %v", ack)
				}
			}
			as := agent.NextAssignment(wait)
			if as.GetRef().GetTaskId() != "t1" {
				t.Fatalf("assignment for %s, want t1", as.GetRef().GetTaskId())
			}
			if v := recordVersion(t, env, "t1"); v != 2 {
				t.Fatalf("record written %d times after the claim, want 2 (created, claimed)", v)
			}
		})
	}
}
