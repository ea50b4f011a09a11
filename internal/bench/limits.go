package bench

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// setLimit sets max_running on bench.noop and waits until the schedulers
// answering apply it (ListQueues' applied, on 8 answers in a row: requests
// are spread over the schedulers), at most 10 s.
func setLimit(ctx context.Context, cc grpc.ClientConnInterface, n int32) error {
	q := reevev1.NewQueueServiceClient(cc)
	if _, err := q.SetQueueLimit(ctx, &reevev1.SetQueueLimitRequest{Type: "bench.noop", MaxRunning: n}); err != nil {
		return fmt.Errorf("bench: set max_running: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for inRow := 0; inRow < 8; {
		resp, err := q.ListQueues(ctx, &reevev1.ListQueuesRequest{})
		if err != nil {
			return fmt.Errorf("bench: list queues: %w", err)
		}
		applied := false
		for _, qu := range resp.GetQueues() {
			applied = applied || (qu.GetType() == "bench.noop" && qu.GetApplied() && qu.GetConfig().GetMaxRunning() == n)
		}
		if applied {
			inRow++
			continue
		}
		inRow = 0
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: max_running %d on bench.noop not applied within 10s", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
