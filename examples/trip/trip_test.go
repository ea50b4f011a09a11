package trip_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/client"
	"github.com/reeve-org/reeve/examples/trip"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// trip.yaml registered as `reeve workflow register -f` reads it, the
// agent's handlers and Book: a trip is booked; a trip whose card is
// declined ends COMPENSATED with its flight and hotel undone.
func TestTripSaga(t *testing.T) {
	s := testenv.New(t).StartScheduler("")
	c, err := client.Dial(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.SchedulerService().RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: readWorkflow(t, "trip.yaml")}); err != nil {
		t.Fatal(err)
	}
	ledger := trip.NewLedger()
	agent, err := agentsdk.New([]string{s.Addr}, agentsdk.WithLogger(testenv.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	trip.Register(agent, ledger, testenv.Logger())
	agentCtx, stopAgent := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(agentCtx) }()
	defer func() {
		stopAgent()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()

	it, err := trip.Book(ctx, c, "trip-ok", trip.Trip{Traveler: "ada", Nights: 2, Card: "4242"})
	if err != nil {
		t.Fatal(err)
	}
	if it.Flight.Booking != "flight-trip-ok" || it.Hotel.Booking != "hotel-trip-ok" || it.Payment.Amount != 440 {
		t.Fatalf("itinerary %+v", it)
	}

	_, err = trip.Book(ctx, c, "trip-declined", trip.Trip{Traveler: "bob", Nights: 1, Card: "declined"})
	var failed *client.TaskError
	if !errors.As(err, &failed) || failed.State != reevev1.TaskState_TASK_STATE_COMPENSATED || failed.Step != "charge_card" || failed.StepError.GetCode() != "card_declined" {
		t.Fatalf("declined card: %v; want a *client.TaskError COMPENSATED by charge_card's card_declined", err)
	}
	if got, want := ledger.Active(), []string{"charge-trip-ok", "flight-trip-ok", "hotel-trip-ok"}; !slices.Equal(got, want) {
		t.Fatalf("still booked: %q; want only trip-ok's bookings (trip-declined's undone)", got)
	}
}

// readWorkflow reads a YAML workflow file as `reeve workflow register -f`
// does: YAML to JSON, then protojson with unknown fields refused.
func readWorkflow(t *testing.T, path string) *reevev1.Workflow {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	w := &reevev1.Workflow{}
	if err := protojson.Unmarshal(j, w); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return w
}
