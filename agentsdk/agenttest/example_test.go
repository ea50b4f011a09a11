package agenttest_test

import (
	"context"
	"fmt"
	"log"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/agentsdk/agenttest"
)

func Example() {
	type Order struct {
		OrderID string `json:"order_id"`
	}
	charge := func(ctx context.Context, s *agentsdk.Step, o Order) (map[string]string, error) {
		if err := s.Heartbeat(ctx); err != nil {
			return nil, err
		}
		if o.OrderID == "" {
			return nil, &agentsdk.Error{Code: "bad_order", Message: "no order id", NonRetryable: true}
		}
		return map[string]string{"charge_id": "ch-" + o.OrderID}, nil
	}

	res, err := agenttest.Run(context.Background(), agentsdk.Typed(charge), agenttest.Step{
		Type:  "payments.charge",
		Input: map[string]any{"order_id": "o-1"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(res.Output), res.Heartbeats)

	res, _ = agenttest.Run(context.Background(), agentsdk.Typed(charge), agenttest.Step{Input: map[string]any{}})
	fmt.Println(res.Error.Code, res.Error.NonRetryable)
	// Output:
	// {"charge_id":"ch-o-1"} 1
	// bad_order true
}
