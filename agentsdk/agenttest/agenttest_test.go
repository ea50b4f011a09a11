package agenttest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/agentsdk/agenttest"
)

type order struct {
	OrderID string `json:"order_id"`
}

type receipt struct {
	ChargeID string `json:"charge_id"`
	Key      string `json:"key"`
}

// charge is the handler under test: it reads the input and a dependency's
// output, heartbeats, and fails for good on a declined card.
func charge(ctx context.Context, s *agentsdk.Step, o order) (receipt, error) {
	var hold struct {
		Amount int `json:"amount"`
	}
	if err := s.DependencyOutput("reserve", &hold); err != nil {
		return receipt{}, err
	}
	for range 3 {
		if err := s.Heartbeat(ctx); err != nil {
			return receipt{}, err
		}
	}
	if o.OrderID == "declined" {
		return receipt{}, &agentsdk.Error{Code: "card_declined", Message: fmt.Sprintf("card declined for %d", hold.Amount), NonRetryable: true}
	}
	return receipt{ChargeID: "ch-" + o.OrderID, Key: s.IdempotencyKey}, nil
}

func TestRunReportsOutputHeartbeatsAndErrors(t *testing.T) {
	deps := map[string]any{"reserve": map[string]int{"amount": 42}}
	ok, err := agenttest.Run(context.Background(), agentsdk.Typed(charge), agenttest.Step{Type: "charge", Input: order{"o-1"}, DependencyOutputs: deps})
	if err != nil {
		t.Fatal(err)
	}
	var got receipt
	if err := ok.Decode(&got); err != nil || got != (receipt{"ch-o-1", "task-1/charge"}) || ok.Heartbeats != 3 || ok.Error != nil || ok.Late {
		t.Fatalf("success: output %+v (%v), heartbeats %d, error %v, late %v", got, err, ok.Heartbeats, ok.Error, ok.Late)
	}

	declined, err := agenttest.Run(context.Background(), agentsdk.Typed(charge), agenttest.Step{Input: order{"declined"}, DependencyOutputs: deps})
	if err != nil {
		t.Fatal(err)
	}
	want := agentsdk.Error{Code: "card_declined", Message: "card declined for 42", NonRetryable: true}
	if declined.Error == nil || *declined.Error != want || declined.Output != nil {
		t.Fatalf("declined: error %+v, output %s; want %+v and no output", declined.Error, declined.Output, want)
	}

	missing, err := agenttest.Run(context.Background(), agentsdk.Typed(charge), agenttest.Step{Input: order{"o-2"}})
	if err != nil {
		t.Fatal(err)
	}
	if missing.Error == nil || missing.Error.NonRetryable || missing.Returned == nil {
		t.Fatalf("missing dependency: error %+v, returned %v; want a retryable error", missing.Error, missing.Returned)
	}
}

func TestRunRecoversPanicsAndReportsLateResults(t *testing.T) {
	panicked, err := agenttest.Run(context.Background(), func(context.Context, *agentsdk.Step) (any, error) { panic("boom") }, agenttest.Step{})
	if err != nil {
		t.Fatal(err)
	}
	if panicked.Error == nil || panicked.Error.Code != "panic" || panicked.Error.NonRetryable {
		t.Fatalf("panic: error %+v; want retryable code panic", panicked.Error)
	}
	late, err := agenttest.Run(context.Background(), func(ctx context.Context, s *agentsdk.Step) (any, error) {
		<-ctx.Done()
		if !errors.Is(s.Heartbeat(ctx), context.DeadlineExceeded) {
			return nil, errors.New("heartbeat after the deadline succeeded")
		}
		return "too late", nil
	}, agenttest.Step{Timeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !late.Late || late.Heartbeats != 0 {
		t.Fatalf("late: %+v; want Late and no heartbeat counted", late)
	}
}

// A Step built by hand (in a test, outside any agent) does not panic on
// Heartbeat.
func TestHandBuiltStepHeartbeats(t *testing.T) {
	var s agentsdk.Step
	if err := s.Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestRunDeferred(t *testing.T) {
	var token string
	h := func(ctx context.Context, s *agentsdk.Step) (any, error) {
		token = s.CompletionToken()
		return nil, s.Defer("waiting for the webhook")
	}
	r, err := agenttest.Run(context.Background(), h, agenttest.Step{Type: "bank.transfer"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Deferred || r.DeferReason != "waiting for the webhook" || r.Error != nil || token == "" {
		t.Fatalf("result %+v, token %q: want deferred", r, token)
	}
	// A compensation has no token: Defer fails the step (retryable).
	r, err = agenttest.Run(context.Background(), h, agenttest.Step{Type: "bank.transfer", Compensation: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Deferred || r.Error == nil || r.Error.Code != "defer_unsupported" || r.Error.NonRetryable {
		t.Fatalf("compensation's result %+v: want the retryable error defer_unsupported", r)
	}
}
