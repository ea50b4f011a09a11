package scheduler_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// Watches show a wait (the step WAITING, then SUCCEEDED by its
// completion), and no message a client reads — a watched task, its
// history, a list, the response of a completion — carries the completion
// token.
func TestWatchesShowWaitsAndNeverTheToken(t *testing.T) {
	_, s, c := newEnv(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 4, "inv", "ship"))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	all, err := c.WatchTasks(ctx, &reevev1.WatchTasksRequest{View: reevev1.TaskView_TASK_VIEW_FULL})
	if err != nil {
		t.Fatal(err)
	}
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "w", Workflow: approvalFlow(time.Hour, nil)})
	one, err := c.WatchTask(ctx, &reevev1.WatchTaskRequest{TaskId: "w"})
	if err != nil {
		t.Fatal(err)
	}
	var seen [][]byte // every message a client got, marshaled
	keep := func(m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, b)
	}
	// until reads a stream until the task's approve step is in state st.
	until := func(recv func() (*reevev1.Task, error), st reevev1.StepState) {
		t.Helper()
		for range 100 {
			task, err := recv()
			if err != nil {
				t.Fatalf("watch: %v", err)
			}
			keep(task)
			if task.GetId() == "w" && stepOf(task, "approve").GetState() == st {
				return
			}
		}
		t.Fatalf("no change of approve to %v in 100 events", st)
	}
	recvOne := func() (*reevev1.Task, error) { m, err := one.Recv(); return m.GetTask(), err }
	recvAll := func() (*reevev1.Task, error) { m, err := all.Recv(); return m.GetChanged().GetTask(), err }

	agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
	until(recvOne, reevev1.StepState_STEP_STATE_WAITING)
	until(recvAll, reevev1.StepState_STEP_STATE_WAITING)
	tok := tokenOf(t, c, "", "w", "approve")
	resp, err := completeStep(c, &reevev1.CompleteStepRequest{Token: tok, Outcome: output("yes")})
	if err != nil {
		t.Fatal(err)
	}
	keep(resp)
	until(recvOne, reevev1.StepState_STEP_STATE_SUCCEEDED)
	until(recvAll, reevev1.StepState_STEP_STATE_SUCCEEDED)
	keep(getTask(t, c, "w"))
	list, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{View: reevev1.TaskView_TASK_VIEW_FULL})
	if err != nil {
		t.Fatal(err)
	}
	keep(list)
	waiting, err := c.ListWaitingSteps(ctx, &reevev1.ListWaitingStepsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	keep(waiting)
	secret := []byte(tok[len("rvt1."):])
	for i, b := range seen {
		if bytes.Contains(b, secret) || bytes.Contains(b, []byte("rvt1.")) {
			t.Fatalf("message %d a client read carries the completion token", i)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// No log line of the scheduler, at debug level, carries a completion
// token: not its assignment, its deferral, a completion by it, nor the
// refusals of a tampered one.
func TestCompletionTokensAreNeverLogged(t *testing.T) {
	var logs syncBuffer
	env := testenv.New(t)
	s := env.StartScheduler("", scheduler.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	c := s.Client(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("a-1", 4, "pay", "ship"))
	pay := step("pay", "pay")
	pay.Timeout = durationpb.New(time.Hour)
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "l", Workflow: inline(pay, step("ship", "ship", "pay"))})
	as := agent.NextAssignment(wait)
	tok := as.GetCompletionToken()
	deferStep(t, agent, as)
	tampered := tok[:len(tok)-2] + "AA"
	if _, err := completeStep(c, &reevev1.CompleteStepRequest{Token: tampered, Outcome: output("x")}); err == nil {
		t.Fatal("a tampered token was accepted")
	}
	if _, err := completeStep(c, &reevev1.CompleteStepRequest{Token: tok, Outcome: output("paid")}); err != nil {
		t.Fatal(err)
	}
	if _, err := completeStep(c, &reevev1.CompleteStepRequest{Token: tok, Outcome: output("other")}); err == nil {
		t.Fatal("another completion was accepted")
	}
	agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
	testenv.WaitTask(t, c, "default", "l", wait)
	out := logs.String()
	if !strings.Contains(out, "step completed from outside") {
		t.Fatalf("the completion was not logged: %s", out)
	}
	for _, secret := range []string{tok[len("rvt1."):], tampered[len("rvt1."):]} {
		if strings.Contains(out, secret[:20]) {
			t.Fatalf("a log line carries a completion token:\n%s", out)
		}
	}
}
