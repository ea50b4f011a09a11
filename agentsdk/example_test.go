package agentsdk_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/reeve-org/reeve/agentsdk"
)

func ExampleAgent() {
	agent, err := agentsdk.New([]string{"127.0.0.1:7430"}, agentsdk.WithMaxConcurrentSteps(8))
	if err != nil {
		log.Fatal(err)
	}
	agent.Handle("payments.charge", func(ctx context.Context, s *agentsdk.Step) (any, error) {
		var order struct {
			OrderID string `json:"order_id"`
		}
		if err := s.Input(&order); err != nil {
			return nil, agentsdk.Permanent(err)
		}
		// Call the payment service with s.IdempotencyKey; ctx ends at the
		// step's complete-by.
		return map[string]string{"charge_id": "ch-" + order.OrderID}, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_ = agent.Run(ctx) // serves until ctx ends, then drains
}

func ExamplePermanent() {
	err := agentsdk.Permanent(errors.New("card declined"))
	fmt.Println(agentsdk.IsPermanent(err), agentsdk.IsPermanent(errors.New("timeout")))
	// Output: true false
}

func ExampleRetry() {
	calls := 0
	err := agentsdk.Retry(context.Background(), agentsdk.RetrySettings{InitialBackoff: time.Millisecond}, func(ctx context.Context) error {
		calls++
		if calls < 3 {
			return errors.New("service unavailable")
		}
		return nil
	})
	fmt.Println(calls, err)
	// Output: 3 <nil>
}

func ExampleBreaker() {
	payments := agentsdk.NewBreaker("payments", agentsdk.BreakerSettings{ConsecutiveFailures: 1})
	ctx := context.Background()
	_ = payments.Do(ctx, func(context.Context) error { return errors.New("503") })
	err := payments.Do(ctx, func(context.Context) error { return nil })
	fmt.Println(errors.Is(err, agentsdk.ErrCircuitOpen))
	// Output: true
}

func ExampleTyped() {
	type Order struct {
		OrderID string `json:"order_id"`
	}
	type Receipt struct {
		ChargeID string `json:"charge_id"`
	}
	agent, err := agentsdk.New([]string{"127.0.0.1:7430"})
	if err != nil {
		log.Fatal(err)
	}
	// Order is decoded from the task's input; Receipt is the step's output.
	agent.Handle("payments.charge", agentsdk.Typed(func(ctx context.Context, s *agentsdk.Step, o Order) (Receipt, error) {
		return Receipt{ChargeID: "ch-" + o.OrderID}, nil
	}))
}
