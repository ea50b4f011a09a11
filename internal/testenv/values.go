package testenv

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Value converts a JSON-like Go value to a google.protobuf.Value.
func Value(t testing.TB, v any) *structpb.Value {
	t.Helper()
	if v == nil {
		return nil
	}
	if m, ok := v.(map[string]any); ok && m == nil {
		return nil
	}
	pv, err := structpb.NewValue(v)
	if err != nil {
		t.Fatalf("value %v: %v", v, err)
	}
	return pv
}

// WaitTask watches a task until it is in a terminal state and returns it,
// failing the test after timeout.
func WaitTask(t testing.TB, c reevev1.SchedulerServiceClient, ns, id string, timeout time.Duration) *reevev1.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	stream, err := c.WatchTask(ctx, &reevev1.WatchTaskRequest{Namespace: ns, TaskId: id})
	if err != nil {
		t.Fatalf("watch %s: %v", id, err)
	}
	var last *reevev1.Task
	for {
		resp, err := stream.Recv()
		if err != nil {
			if last != nil && taskstate.TerminalTask(last.GetState()) {
				return last
			}
			t.Fatalf("watch %s: %v (last state %v)", id, err, last.GetState())
		}
		last = resp.GetTask()
	}
}
