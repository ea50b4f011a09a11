package agentsdk_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// sendGate holds every message of the agent's stream after Register until
// opened, as a stream the scheduler stops reading would, and records what
// went out.
type sendGate struct {
	open chan struct{}
	mu   sync.Mutex
	sent []*reevev1.ConnectRequest
}

func (g *sendGate) interceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	return gatedStream{ClientStream: cs, g: g}, err
}

type gatedStream struct {
	grpc.ClientStream
	g *sendGate
}

func (s gatedStream) SendMsg(m any) error {
	req := m.(*reevev1.ConnectRequest)
	if req.GetRegister() == nil {
		select {
		case <-s.g.open:
		case <-s.Context().Done():
			return s.Context().Err()
		}
	}
	s.g.mu.Lock()
	s.g.sent = append(s.g.sent, req)
	s.g.mu.Unlock()
	return s.ClientStream.SendMsg(m)
}

// TestFullSendQueueLosesNothing fills the agent's send queue — a stream that
// sends nothing while steps are acknowledged, heartbeat and finish, with a
// result queue of one — and checks that every ack, heartbeat and result
// reaches the scheduler once the stream moves again.
func TestFullSendQueueLosesNothing(t *testing.T) {
	const steps = 6
	env := testenv.New(t)
	// The acks are held for as long as the test needs: not taken back.
	s := env.StartScheduler("", scheduler.WithAckTimeout(time.Hour))
	g := &sendGate{open: make(chan struct{})}
	a := newAgent(t, []string{s.Addr}, agentsdk.WithMaxConcurrentSteps(steps), agentsdk.WithResultQueue(1),
		agentsdk.WithDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStreamInterceptor(g.interceptor)))
	returned := make(chan string, steps)
	a.Handle("work", func(ctx context.Context, st *agentsdk.Step) (any, error) {
		if err := st.Heartbeat(ctx); err != nil {
			return nil, err
		}
		returned <- st.TaskID
		return map[string]string{"done": st.TaskID}, nil
	})
	runAgent(t, a)
	c := s.Client(t)
	for i := range steps {
		submit(t, c, fmt.Sprintf("t%d", i), spec("work", "work", time.Minute))
	}
	// Every handler returned while nothing could be sent: acks, heartbeats
	// and results are all waiting, more results than the queue holds.
	for range steps {
		select {
		case <-returned:
		case <-time.After(wait):
			t.Fatal("handlers did not all run")
		}
	}
	close(g.open)
	for i := range steps {
		id := fmt.Sprintf("t%d", i)
		if final := testenv.WaitTask(t, c, "default", id, wait); final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
			t.Fatalf("task %s %v: %v", id, final.GetState(), final.GetReason())
		}
	}
	acks, beats, results := map[string]bool{}, map[string]bool{}, map[string]bool{}
	g.mu.Lock()
	for _, m := range g.sent {
		switch {
		case m.GetAssignmentAck() != nil:
			acks[m.GetAssignmentAck().GetRef().GetTaskId()] = true
		case m.GetHeartbeat() != nil:
			for _, r := range m.GetHeartbeat().GetRefs() {
				beats[r.GetTaskId()] = true
			}
		case m.GetResult() != nil:
			results[m.GetResult().GetRef().GetTaskId()] = true
		}
	}
	g.mu.Unlock()
	if len(acks) != steps || len(beats) != steps || len(results) != steps {
		t.Fatalf("sent acks for %d, heartbeats for %d, results for %d tasks; want %d of each", len(acks), len(beats), len(results), steps)
	}
}
