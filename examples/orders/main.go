// Command orders is a complete Reeve agent for the order example of the
// Scheduler Agent Supervisor pattern: reserve stock, charge the payment,
// ship. Its payment step calls a flaky remote service (started by the
// example on a loopback port) through agentsdk.Retry and agentsdk.Breaker,
// passing the step's idempotency key so that retries never charge twice.
//
//	reeve dev                                # in one terminal
//	go run ./examples/orders --submit 5      # in another
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

// workflowName is the workflow the example registers.
const workflowName = "example.orders"

func orderWorkflow() *reevev1.Workflow {
	step := func(name, typ, undo string, deps ...string) *reevev1.StepSpec {
		return &reevev1.StepSpec{Name: name, Type: typ, DependsOn: deps, Timeout: durationpb.New(5 * time.Second),
			Compensation: &reevev1.CompensationSpec{Type: undo}}
	}
	charge := step("charge", "example.payments.charge", "example.payments.refund", "reserve")
	charge.Escalation = reevev1.Escalation_ESCALATION_COMPENSATE
	return &reevev1.Workflow{
		Name:        workflowName,
		Description: "Reserve stock, charge through a flaky payment service, ship; compensate if payment cannot be made.",
		Steps: []*reevev1.StepSpec{
			step("reserve", "example.inventory.reserve", "example.inventory.release"),
			charge,
			step("ship", "example.shipping.ship", "example.shipping.cancel", "charge"),
		},
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	address := fs.String("address", "127.0.0.1:7430", "scheduler address")
	submit := fs.Int("submit", 0, "submit this many orders, wait for them, then exit (0: serve until interrupted)")
	failRate := fs.Float64("fail-rate", 0.3, "share of payment requests the flaky service fails")
	seed := fs.Uint64("seed", 0, "seed of the flaky service's failures (0: random)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	payments := newPaymentService(*failRate, *seed)
	paymentsURL, stopPayments, err := payments.start()
	if err != nil {
		return err
	}
	defer stopPayments()

	cc, err := grpc.NewClient(*address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	client := reevev1.NewSchedulerServiceClient(cc)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	reg, err := client.RegisterWorkflow(rctx, &reevev1.RegisterWorkflowRequest{Workflow: orderWorkflow()})
	cancel()
	if err != nil {
		return fmt.Errorf("register workflow (is reeve dev running at %s?): %w", *address, err)
	}
	fmt.Fprintf(stdout, "registered %s version %d\n", workflowName, reg.GetWorkflow().GetVersion())

	agent, err := agentsdk.New([]string{*address}, agentsdk.WithLogger(log), agentsdk.WithAgentID("orders-example"))
	if err != nil {
		return err
	}
	register(agent, paymentsURL)
	agentCtx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	agentDone := make(chan error, 1)
	go func() { agentDone <- agent.Run(agentCtx) }()

	if *submit == 0 {
		fmt.Fprintln(stdout, "agent running; submit orders with: reeve task submit --workflow", workflowName, `--input '{"order_id":"o-1"}' --wait`)
		return <-agentDone
	}
	if err := submitAndWait(ctx, client, *submit, stdout); err != nil {
		return err
	}
	calls, charges := payments.stats()
	fmt.Fprintf(stdout, "payment service: %d calls, %d distinct charges\n", calls, charges)
	stopAgent()
	return <-agentDone
}

// register adds the example's handlers to the agent.
func register(a *agentsdk.Agent, paymentsURL string) {
	breaker := agentsdk.NewBreaker("payments", agentsdk.BreakerSettings{ConsecutiveFailures: 5, OpenTimeout: 2 * time.Second})
	httpClient := &http.Client{}
	ok := func(v any) agentsdk.HandlerFunc {
		return func(context.Context, *agentsdk.Step) (any, error) { return v, nil }
	}
	a.Handle("example.inventory.reserve", ok(map[string]bool{"reserved": true}))
	a.Handle("example.inventory.release", ok(map[string]bool{"released": true}))
	a.Handle("example.shipping.ship", ok(map[string]bool{"shipped": true}))
	a.Handle("example.shipping.cancel", ok(map[string]bool{"canceled": true}))
	a.Handle("example.payments.refund", ok(map[string]bool{"refunded": true}))
	a.Handle("example.payments.charge", func(ctx context.Context, s *agentsdk.Step) (any, error) {
		var charge map[string]any
		// Retry transient failures with backoff, but never past the step's
		// complete-by (ctx's deadline); the breaker stops hammering a
		// provider that keeps failing.
		err := agentsdk.Retry(ctx, agentsdk.RetrySettings{MaxAttempts: 6, InitialBackoff: 50 * time.Millisecond}, func(ctx context.Context) error {
			return breaker.Do(ctx, func(ctx context.Context) error {
				var err error
				charge, err = postCharge(ctx, httpClient, paymentsURL, s.IdempotencyKey)
				return err
			})
		})
		return charge, err
	})
}

// postCharge asks the payment service to charge once per idempotency key.
func postCharge(ctx context.Context, c *http.Client, url, key string) (map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/charges", nil)
	if err != nil {
		return nil, agentsdk.Permanent(err)
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err // transient: the network
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 500:
		return nil, fmt.Errorf("payment service: %s", resp.Status)
	case resp.StatusCode >= 400:
		return nil, agentsdk.Permanent(fmt.Errorf("payment service refused: %s", resp.Status))
	}
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

// submitAndWait submits n orders and prints each final state.
func submitAndWait(ctx context.Context, c reevev1.SchedulerServiceClient, n int, stdout io.Writer) error {
	ids := make([]string, 0, n)
	for i := range n {
		input, _ := structpb.NewValue(map[string]any{"order_id": fmt.Sprintf("o-%d-%d", time.Now().Unix(), i)})
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := c.SubmitTask(sctx, &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: workflowName}}, Input: input})
		cancel()
		if err != nil {
			return err
		}
		ids = append(ids, resp.GetTask().GetId())
	}
	for _, id := range ids {
		final, err := wait(ctx, c, id)
		if err != nil {
			return err
		}
		charge := final.GetSteps()[1]
		fmt.Fprintf(stdout, "%s %s (charge: attempt %d, %s)\n", id, final.GetState(), charge.GetAttempt(), charge.GetState())
	}
	return nil
}

func wait(ctx context.Context, c reevev1.SchedulerServiceClient, id string) (*reevev1.Task, error) {
	stream, err := c.WatchTask(ctx, &reevev1.WatchTaskRequest{TaskId: id})
	if err != nil {
		return nil, err
	}
	var last *reevev1.Task
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) && last != nil {
			return last, nil
		}
		if err != nil {
			return nil, err
		}
		last = resp.GetTask()
	}
}
