// Package demo holds the demo workflows and agents that `reeve dev --demo`
// registers and runs.
package demo

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// Workflows returns the demo workflows: demo.orders (the pattern's order
// example), demo.timeout (an attempt that never answers and is retried) and
// demo.compensate (a permanent failure undone by compensation).
func Workflows() []*reevev1.Workflow {
	timeout := durationpb.New(10 * time.Second)
	reserve := &reevev1.StepSpec{Name: "reserve", Type: "inventory.reserve", Timeout: timeout,
		Compensation: &reevev1.CompensationSpec{Type: "inventory.release"}}
	charge := &reevev1.StepSpec{Name: "charge", Type: "payments.charge", DependsOn: []string{"reserve"}, Timeout: timeout,
		Compensation: &reevev1.CompensationSpec{Type: "payments.refund"}}
	return []*reevev1.Workflow{
		{
			Name:        "demo.orders",
			Description: "Reserve stock, charge the payment, ship the parcel; each step undone by its compensation.",
			Steps: []*reevev1.StepSpec{reserve, charge, {
				Name: "ship", Type: "shipping.ship", DependsOn: []string{"charge"}, Timeout: timeout,
				Compensation: &reevev1.CompensationSpec{Type: "shipping.cancel"},
			}},
		},
		{
			Name:        "demo.timeout",
			Description: "The first attempt never answers; the supervisor retries it after its complete-by.",
			Steps: []*reevev1.StepSpec{{
				Name: "flaky", Type: "demo.sometimes_silent", Timeout: durationpb.New(2 * time.Second),
				RetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 3, InitialBackoff: durationpb.New(200 * time.Millisecond)},
			}},
		},
		{
			Name:        "demo.compensate",
			Description: "Shipping fails permanently; as in any workflow that declares compensations, the charge and the reservation are undone in reverse order.",
			Steps: []*reevev1.StepSpec{reserve, charge, {
				// No escalation: a workflow with compensations compensates
				// when a step fails for good.
				Name: "ship", Type: "shipping.ship_fail", DependsOn: []string{"charge"}, Timeout: timeout,
			}},
		},
	}
}

type order struct {
	OrderID string `json:"order_id"`
}

// Register registers a handler on a for every step type the demo workflows use.
func Register(a *agentsdk.Agent) {
	a.Handle("inventory.reserve", func(ctx context.Context, s *agentsdk.Step) (any, error) {
		var o order
		_ = s.Input(&o)
		return map[string]string{"reservation_id": "res-" + o.OrderID, "idempotency_key": s.IdempotencyKey}, nil
	})
	a.Handle("inventory.release", func(ctx context.Context, s *agentsdk.Step) (any, error) {
		return map[string]bool{"released": true}, nil
	})
	a.Handle("payments.charge", func(ctx context.Context, s *agentsdk.Step) (any, error) {
		var o order
		_ = s.Input(&o)
		return map[string]string{"charge_id": "ch-" + o.OrderID}, nil
	})
	a.Handle("payments.refund", func(ctx context.Context, s *agentsdk.Step) (any, error) {
		var charged struct {
			ChargeID string `json:"charge_id"`
		}
		if err := s.DependencyOutput("charge", &charged); err != nil {
			return nil, agentsdk.Permanent(err)
		}
		return map[string]string{"refunded": charged.ChargeID}, nil
	})
	a.Handle("shipping.ship", func(ctx context.Context, s *agentsdk.Step) (any, error) {
		var o order
		_ = s.Input(&o)
		return map[string]string{"tracking": "trk-" + o.OrderID}, nil
	})
	a.Handle("shipping.cancel", func(ctx context.Context, s *agentsdk.Step) (any, error) {
		return map[string]bool{"canceled": true}, nil
	})
	a.Handle("shipping.ship_fail", func(ctx context.Context, s *agentsdk.Step) (any, error) {
		return nil, agentsdk.Permanent(errors.New("carrier rejected the parcel"))
	})
	a.Handle("demo.sometimes_silent", func(ctx context.Context, s *agentsdk.Step) (any, error) {
		if s.Attempt == 1 {
			<-ctx.Done() // never answer: the complete-by passes
			return nil, ctx.Err()
		}
		return map[string]int{"answered_on_attempt": s.Attempt}, nil
	})
}
