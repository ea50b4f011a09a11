package agentsdk

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

func ref(i int) *reevev1.StepRef {
	return &reevev1.StepRef{Namespace: "default", TaskId: fmt.Sprintf("t%d", i), Step: "s", Attempt: 1}
}

// However much is queued, acks come out first and all of them, heartbeats
// merged into one message, then the results.
func TestOutboxKeepsEverythingInOrderOfUrgency(t *testing.T) {
	ctx := context.Background()
	o := newOutbox(1)
	if err := o.putResult(ctx, &reevev1.StepResult{Ref: ref(0)}); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	for i := range n {
		o.push(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_AssignmentAck{AssignmentAck: &reevev1.AssignmentAck{Ref: ref(i)}}})
		o.beat(ref(i), nil)
		o.beat(ref(i), nil)
	}
	for i := range n {
		if m, _ := o.next(ctx); m.GetAssignmentAck().GetRef().GetTaskId() != ref(i).GetTaskId() {
			t.Fatalf("message %d is %v, want the ack of %s", i, m, ref(i).GetTaskId())
		}
	}
	if m, _ := o.next(ctx); len(m.GetHeartbeat().GetRefs()) != n {
		t.Fatalf("after the acks: %d heartbeat refs, want %d merged in one message", len(m.GetHeartbeat().GetRefs()), n)
	}
	if m, _ := o.next(ctx); m.GetResult() == nil {
		t.Fatalf("last: %v, want the result", m)
	}
}

// A result beyond the limit waits for room: until the send loop takes one,
// its ctx ends, or the stream ends.
func TestOutboxResultsWaitForRoom(t *testing.T) {
	o := newOutbox(1)
	if err := o.putResult(context.Background(), &reevev1.StepResult{Ref: ref(0)}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := o.putResult(short, &reevev1.StepResult{Ref: ref(1)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("put into a full queue: %v, want the ctx's deadline", err)
	}
	put := make(chan error, 1)
	go func() { put <- o.putResult(context.Background(), &reevev1.StepResult{Ref: ref(2)}) }()
	if m, _ := o.next(context.Background()); m.GetResult().GetRef().GetTaskId() != "t0" {
		t.Fatalf("first result %v, want t0", m)
	}
	if err := <-put; err != nil {
		t.Fatalf("put after the send loop made room: %v", err)
	}
	go func() { put <- o.putResult(context.Background(), &reevev1.StepResult{Ref: ref(3)}) }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		o.mu.Lock()
		waiting := o.waiting[refKey(ref(3))]
		o.mu.Unlock()
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("t3 never waited for room")
		}
		time.Sleep(time.Millisecond)
	}
	// A drained stream waits for the answers to t2 (queued) only: t3 was
	// never sent on it.
	if sent := o.closeSent([]string{refKey(ref(2)), refKey(ref(3))}); len(sent) != 1 || sent[0] != refKey(ref(2)) {
		t.Fatalf("closeSent: %v, want t2 only", sent)
	}
	if err := <-put; !errors.Is(err, errOutboxClosed) {
		t.Fatalf("put waiting when the stream ended: %v, want errOutboxClosed", err)
	}
	if m, ok := o.next(context.Background()); m.GetResult().GetRef().GetTaskId() != "t2" || !ok {
		t.Fatalf("after close: %v, want the queued t2 still sent", m)
	}
	if m, ok := o.next(context.Background()); ok || m != nil {
		t.Fatalf("closed and empty: %v, %v; want the end", m, ok)
	}
}
