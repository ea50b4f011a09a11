package agentsdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// A handler hands its step off with Defer and passes the token on; the
// step is completed with the token after the agent stopped, and the
// workflow goes on.
func TestDeferredStepIsCompletedWithItsToken(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	a := newAgent(t, []string{s.Addr})
	tokens := make(chan string, 1)
	a.Handle("transfer", func(ctx context.Context, st *agentsdk.Step) (any, error) {
		tokens <- st.CompletionToken() // e.g. in the bank's callback URL
		err := st.Defer("waiting for the bank")
		if !errors.Is(err, agentsdk.ErrDeferred) {
			t.Errorf("Defer = %v, want ErrDeferred", err)
		}
		return nil, err
	})
	stop := runAgent(t, a)
	c := s.Client(t)
	submit(t, c, "t", spec("transfer", "transfer", time.Hour))
	tok := <-tokens
	if tok == "" {
		t.Fatal("no completion token")
	}
	// Deferred: RUNNING, handed off; the agent may go away.
	deadline := time.Now().Add(wait)
	for {
		if st := getStep(t, c, "t", "transfer"); st.GetDeferred() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the step was not deferred")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c.CompleteStep(ctx, &reevev1.CompleteStepRequest{Token: tok, Outcome: &reevev1.CompleteStepRequest_Output{Output: structpb.NewStringValue("settled")}}); err != nil {
		t.Fatal(err)
	}
	final := testenv.WaitTask(t, c, "default", "t", wait)
	if final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || final.GetSteps()[0].GetOutput().GetStringValue() != "settled" {
		t.Fatalf("task %v, step %v", final.GetState(), final.GetSteps()[0])
	}
}

func getStep(t *testing.T, c reevev1.SchedulerServiceClient, id, name string) *reevev1.Step {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range resp.GetTask().GetSteps() {
		if s.GetName() == name {
			return s
		}
	}
	return nil
}
