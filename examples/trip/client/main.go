// Command client books a trip (see package trip) and prints the itinerary,
// or why it could not be booked. It exits 0 when the trip was booked, 2
// when the task ended without succeeding (its bookings undone when
// COMPENSATED), 1 on any other error.
//
//	go run ./examples/trip/client --id trip-1                  # booked
//	go run ./examples/trip/client --id trip-2 --card declined  # undone
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/reeve-org/reeve/client"
	"github.com/reeve-org/reeve/examples/trip"
)

func main() { os.Exit(run()) }

func run() int {
	address := flag.String("address", "127.0.0.1:7430", "scheduler address(es), comma-separated")
	id := flag.String("id", "", "task id: the same id again is the same trip (default: a new one)")
	card := flag.String("card", "4242", `card to charge ("declined" is declined)`)
	traveler := flag.String("traveler", "ada", "who travels")
	timeout := flag.Duration("timeout", time.Minute, "how long to wait for the trip")
	ca := flag.String("ca", "", "CA bundle of the schedulers' certificates: turns TLS on (default plaintext)")
	cert := flag.String("cert", "", "the client certificate (mutual TLS)")
	key := flag.String("key", "", "the key of --cert")
	flag.Parse()
	if *id == "" {
		*id = fmt.Sprintf("trip-%d", time.Now().UnixNano())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	var opts []client.Option
	if *ca != "" {
		opts = append(opts, client.WithTLSFiles(client.TLSFiles{CA: *ca, Cert: *cert, Key: *key}))
	}
	c, err := client.Dial(*address, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	defer c.Close()
	it, err := trip.Book(ctx, c, *id, trip.Trip{Traveler: *traveler, From: "LHR", To: "JFK", Nights: 3, Card: *card})
	var failed *client.TaskError
	switch {
	case errors.As(err, &failed):
		fmt.Printf("trip %s not booked: %s\n", *id, failed)
		if failed.Step != "" {
			fmt.Printf("  failed step %s (%s): %s\n", failed.Step, failed.StepError.GetCode(), failed.StepError.GetMessage())
		}
		for _, s := range failed.Task.GetSteps() {
			fmt.Printf("  %-12s %s\n", s.GetName(), s.GetState())
		}
		return 2
	case err != nil:
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	fmt.Printf("trip %s booked: flight %s, hotel %s, charged %d (%s)\n", *id, it.Flight.Booking, it.Hotel.Booking, it.Payment.Amount, it.Payment.Charge)
	return 0
}
