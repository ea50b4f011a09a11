package agentsdk

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// errOutboxClosed is returned to a result waiting for room when its stream
// ends: the result stays pending and goes out on the next stream.
var errOutboxClosed = errors.New("agentsdk: stream ended")

// outbox is what one stream still has to send; only that stream's send loop
// takes from it. Nothing in it is ever dropped:
//
//   - assignment acks and the agent's drain are queued without a bound (at
//     most one ack per execution the agent took, so at most its
//     max-concurrent steps);
//   - heartbeats are merged: one ref per execution, sent together in one
//     Heartbeat message;
//   - results are bounded by limit: putResult waits for room, so a handler's
//     goroutine feels the back-pressure of a slow stream instead of the
//     result being lost.
//
// The send loop sends acks and the drain first, then heartbeats, then
// results, so a queue of results never delays an ack past the scheduler's
// ack timeout.
type outbox struct {
	limit int

	mu      sync.Mutex
	control []*reevev1.ConnectRequest
	beats   []*reevev1.StepRef
	beating map[string]bool            // refKeys in beats
	details map[string]*structpb.Value // latest heartbeat details by refKey, sent with beats
	results []*reevev1.StepResult
	waiting map[string]int // refKeys of results in putResult waiting for room
	closed  bool
	wake    chan struct{} // capacity 1: something was added, or closed
	room    chan struct{} // closed and replaced when results shrink or on close
}

func newOutbox(limit int) *outbox {
	return &outbox{limit: max(limit, 1), beating: map[string]bool{}, details: map[string]*structpb.Value{}, waiting: map[string]int{}, wake: make(chan struct{}, 1), room: make(chan struct{})}
}

// push queues an ack or a drain; it never blocks. After close it does
// nothing.
func (o *outbox) push(m *reevev1.ConnectRequest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	o.control = append(o.control, m)
	o.notify()
}

// beat queues a heartbeat for ref unless one is already queued, with
// details when not nil (replacing those queued); it never blocks.
func (o *outbox) beat(ref *reevev1.StepRef, details *structpb.Value) {
	o.mu.Lock()
	defer o.mu.Unlock()
	key := refKey(ref)
	if o.closed {
		return
	}
	if details != nil {
		o.details[key] = details
	}
	if o.beating[key] {
		return
	}
	o.beating[key] = true
	o.beats = append(o.beats, ref)
	o.notify()
}

// putResult queues res, waiting while limit results are queued. It returns
// ctx's error if ctx ends first, or errOutboxClosed if the stream ends.
func (o *outbox) putResult(ctx context.Context, res *reevev1.StepResult) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	waited := false
	for {
		if o.closed {
			return errOutboxClosed
		}
		if len(o.results) < o.limit {
			o.results = append(o.results, res)
			o.notify()
			return nil
		}
		if !waited {
			waited = true
			key := refKey(res.GetRef())
			o.waiting[key]++
			defer func() { // runs before the Unlock deferred above
				if o.waiting[key]--; o.waiting[key] <= 0 {
					delete(o.waiting, key)
				}
			}()
		}
		room := o.room
		o.mu.Unlock()
		select {
		case <-ctx.Done():
			o.mu.Lock()
			return ctx.Err()
		case <-room:
			o.mu.Lock()
		}
	}
}

// resend queues a result the agent already holds (sent on an earlier stream
// and not acknowledged) without waiting: it costs no new memory.
func (o *outbox) resend(res *reevev1.StepResult) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	o.results = append(o.results, res)
	o.notify()
}

// closeSent closes o and returns those of keys whose result is not waiting
// for room then: those were queued (and are sent before the send loop
// ends), or were never handed to o.
func (o *outbox) closeSent(keys []string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closeLocked()
	var out []string
	for _, k := range keys {
		if o.waiting[k] == 0 {
			out = append(out, k)
		}
	}
	return out
}

// close stops new messages; the send loop still sends what is queued. A
// putResult waiting for room returns errOutboxClosed.
func (o *outbox) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closeLocked()
}

func (o *outbox) closeLocked() {
	if o.closed {
		return
	}
	o.closed = true
	o.notify()
	close(o.room)
	o.room = make(chan struct{})
}

// next returns the next message to send, waiting for one; false once the
// outbox is closed and empty, or ctx ended.
func (o *outbox) next(ctx context.Context) (*reevev1.ConnectRequest, bool) {
	for {
		if m, ok := o.take(); m != nil || !ok {
			return m, ok
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-o.wake:
		}
	}
}

// take returns the most urgent queued message: nil and true when there is
// none yet, nil and false when there will be none.
func (o *outbox) take() (*reevev1.ConnectRequest, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case len(o.control) > 0:
		m := o.control[0]
		o.control[0] = nil
		o.control = o.control[1:]
		return m, true
	case len(o.beats) > 0:
		hb := &reevev1.Heartbeat{Refs: o.beats}
		for _, ref := range o.beats {
			if d := o.details[refKey(ref)]; d != nil {
				hb.Details = append(hb.Details, &reevev1.HeartbeatDetails{Ref: ref, Details: d})
			}
		}
		o.beats = nil
		clear(o.beating)
		clear(o.details)
		return &reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Heartbeat{Heartbeat: hb}}, true
	case len(o.results) > 0:
		res := o.results[0]
		o.results[0] = nil
		o.results = o.results[1:]
		if !o.closed {
			close(o.room)
			o.room = make(chan struct{})
		}
		return &reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: res}}, true
	}
	return nil, !o.closed
}

// notify wakes the send loop. Caller holds mu.
func (o *outbox) notify() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}
