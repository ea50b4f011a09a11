// Package trip is the trip-booking saga of the Scheduler Agent Supervisor
// pattern, written with Reeve's Go SDK and Go client: book a flight, book a
// hotel, charge the card, and undo the bookings when the card is declined.
//
//   - trip.yaml is the workflow: three steps, each with a compensation, so
//     that a step that fails for good undoes the steps that succeeded (the
//     default escalation of a workflow with compensations);
//   - Register adds the agent's handlers (examples/trip/agent runs them);
//   - Book is the client's side (examples/trip/client runs it).
//
// The "remote services" are an in-memory Ledger, so that the example runs
// on its own; a real agent would pass Step.IdempotencyKey to them.
package trip

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/client"
)

// Workflow is the name trip.yaml registers.
const Workflow = "trip"

// Trip is the task's input, passed to every step.
type Trip struct {
	Traveler string `json:"traveler"`
	From     string `json:"from"`
	To       string `json:"to"`
	Nights   int    `json:"nights"`
	// Card is the card to charge; "declined" is declined for good.
	Card string `json:"card"`
}

// Itinerary is the task's output: the outputs of its steps, by step name.
type Itinerary struct {
	Flight  Booking `json:"book_flight"`
	Hotel   Booking `json:"book_hotel"`
	Payment Payment `json:"charge_card"`
}

// Booking is the output of book_flight and book_hotel.
type Booking struct {
	Booking string `json:"booking"`
}

// Payment is the output of charge_card.
type Payment struct {
	Charge string `json:"charge"`
	Amount int    `json:"amount"`
}

// Book submits a trip as task id (submitting the same id again returns the
// same task) and waits for it. A trip that could not be booked returns a
// *client.TaskError: COMPENSATED when its bookings were undone.
func Book(ctx context.Context, c *client.Client, id string, t Trip) (*Itinerary, error) {
	run, err := c.Submit(ctx, Workflow, t, client.WithTaskID(id))
	if err != nil {
		return nil, err
	}
	var out Itinerary
	if err := run.Get(ctx, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Ledger stands for the airline's, the hotel's and the bank's systems: what
// is booked and charged now. It is safe for concurrent use.
type Ledger struct {
	mu     sync.Mutex
	active map[string]bool // booking or charge id → not undone
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{active: map[string]bool{}} }

// Active returns the bookings and charges not undone, sorted.
func (l *Ledger) Active() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id, on := range l.active {
		if on {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func (l *Ledger) set(id string, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active[id] = on
}

// Register adds the trip's handlers to agent: the three steps and their
// compensations, recording what they do in ledger and on log.
func Register(agent *agentsdk.Agent, ledger *Ledger, log *slog.Logger) {
	book := func(kind string) agentsdk.HandlerFunc {
		return func(_ context.Context, s *agentsdk.Step) (any, error) {
			var t Trip
			if err := s.Input(&t); err != nil {
				return nil, agentsdk.Permanent(err)
			}
			id := fmt.Sprintf("%s-%s", kind, s.TaskID) // the same on every attempt: booking twice is one booking
			ledger.set(id, true)
			log.Info("booked", "task_id", s.TaskID, "booking", id, "traveler", t.Traveler)
			return Booking{Booking: id}, nil
		}
	}
	undo := func(step string) agentsdk.HandlerFunc {
		return func(_ context.Context, s *agentsdk.Step) (any, error) {
			var b struct {
				Booking string `json:"booking"`
				Charge  string `json:"charge"`
			}
			if err := s.DependencyOutput(step, &b); err != nil { // the output of the step undone
				return nil, agentsdk.Permanent(err)
			}
			id := b.Booking + b.Charge
			ledger.set(id, false)
			log.Info("undone", "task_id", s.TaskID, "step", step, "booking", id)
			return nil, nil
		}
	}
	agent.Handle("trip.book_flight", book("flight"))
	agent.Handle("trip.cancel_flight", undo("book_flight"))
	agent.Handle("trip.book_hotel", book("hotel"))
	agent.Handle("trip.cancel_hotel", undo("book_hotel"))
	agent.Handle("trip.charge_card", func(_ context.Context, s *agentsdk.Step) (any, error) {
		var t Trip
		if err := s.Input(&t); err != nil {
			return nil, agentsdk.Permanent(err)
		}
		if t.Card == "declined" {
			log.Info("card declined", "task_id", s.TaskID)
			// Permanent: retrying cannot help; the step's escalation
			// (compensate, the saga's default) undoes the hotel, then the
			// flight.
			return nil, &agentsdk.Error{Code: "card_declined", Message: "the bank declined the card", NonRetryable: true}
		}
		id := "charge-" + s.TaskID
		amount := 200 + 120*t.Nights
		ledger.set(id, true)
		log.Info("charged", "task_id", s.TaskID, "charge", id, "amount", amount)
		return Payment{Charge: id, Amount: amount}, nil
	})
	agent.Handle("trip.refund_card", undo("charge_card"))
}
