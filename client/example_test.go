package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reeve-org/reeve/client"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

func ExampleDial() {
	c, err := client.Dial("sched-1:7430,sched-2:7430",
		client.WithTLSFiles(client.TLSFiles{CA: "ca.pem", Cert: "client.pem", Key: "client-key.pem"}),
		client.WithNamespace("travel"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

func ExampleClient_Submit() {
	c, err := client.Dial("127.0.0.1:7430")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := c.Submit(ctx, "trip", map[string]string{"traveler": "ada", "card": "4242"},
		client.WithTaskID("trip-ada-1")) // submitting trip-ada-1 again returns this task
	if err != nil {
		log.Fatal(err)
	}
	var out struct {
		BookFlight struct {
			Booking string `json:"booking"`
		} `json:"book_flight"`
	}
	err = run.Get(ctx, &out)
	var failed *client.TaskError
	switch {
	case errors.As(err, &failed):
		fmt.Println("trip not booked:", failed.State, failed.Reason)
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("flight", out.BookFlight.Booking)
	}
}

func ExampleRun_Watch() {
	c, err := client.Dial("127.0.0.1:7430")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for task, err := range c.GetRun("trip-ada-1").Watch(context.Background()) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(task.GetState())
	}
}

func ExampleOutputs() {
	task := &reevev1.Task{Id: "trip-1", Steps: []*reevev1.Step{
		{Name: "book_flight", Output: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"booking": structpb.NewStringValue("F-17")}})},
		{Name: "book_hotel", Output: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"nights": structpb.NewNumberValue(3)}})},
		{Name: "charge_card"}, // no output: it did not succeed
	}}
	var out struct {
		BookFlight struct{ Booking string } `json:"book_flight"`
		BookHotel  struct{ Nights int }     `json:"book_hotel"`
	}
	if err := client.Outputs(task, &out); err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.BookFlight.Booking, out.BookHotel.Nights)
	// Output: F-17 3
}

func ExampleIsTerminal() {
	fmt.Println(client.IsTerminal(reevev1.TaskState_TASK_STATE_COMPENSATING), client.IsTerminal(reevev1.TaskState_TASK_STATE_COMPENSATED))
	// Output: false true
}
