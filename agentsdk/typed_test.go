package agentsdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

type order struct {
	OrderID string `json:"order_id"`
}

// numericOrder does not match the tests' input, whose order_id is a string.
type numericOrder struct {
	OrderID int `json:"order_id"`
}

type receipt struct {
	ChargeID string `json:"charge_id"`
}

func TestTypedHandlerDecodesInputAndEncodesOutput(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	a := newAgent(t, []string{s.Addr})
	a.Handle("charge", agentsdk.Typed(func(ctx context.Context, st *agentsdk.Step, in order) (receipt, error) {
		return receipt{ChargeID: "ch-" + in.OrderID}, nil
	}))
	a.Handle("strict", agentsdk.Typed(func(ctx context.Context, st *agentsdk.Step, in numericOrder) (any, error) {
		t.Error("handler called with input that does not decode")
		return nil, nil
	}))
	runAgent(t, a)
	c := s.Client(t)
	submit(t, c, "typed", spec("charge", "charge", 10*time.Second))
	submit(t, c, "bad-input", spec("strict", "strict", 10*time.Second))

	final := testenv.WaitTask(t, c, "default", "typed", wait)
	if got := final.GetSteps()[0].GetOutput().GetStructValue().GetFields()["charge_id"].GetStringValue(); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || got != "ch-o-1" {
		t.Fatalf("task %v (%s), charge_id %q; want SUCCEEDED with ch-o-1", final.GetState(), final.GetReason(), got)
	}
	bad := testenv.WaitTask(t, c, "default", "bad-input", wait)
	st := bad.GetSteps()[0]
	if bad.GetState() != reevev1.TaskState_TASK_STATE_FAILED || st.GetAttempt() != 1 || st.GetLastError().GetCode() != "bad_input" || !st.GetLastError().GetNonRetryable() {
		t.Fatalf("bad input: task %v, attempt %d, error %v; want FAILED on attempt 1 with non-retryable bad_input", bad.GetState(), st.GetAttempt(), st.GetLastError())
	}
}
