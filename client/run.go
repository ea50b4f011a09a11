package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/retryinfo"
)

// Run is a handle on one task. It is safe for concurrent use.
type Run struct {
	c         *Client
	namespace string
	id        string
	created   bool
}

// ID is the task's id.
func (r *Run) ID() string { return r.id }

// Namespace is the task's namespace.
func (r *Run) Namespace() string { return r.namespace }

// Created reports whether Submit created the task, false when it existed
// already (the same task id submitted again) or when the Run came from
// GetRun.
func (r *Run) Created() bool { return r.created }

// Task returns the task as it is now, with its steps and history.
func (r *Run) Task(ctx context.Context) (*reevev1.Task, error) {
	resp, err := r.c.scheduler.GetTask(ctx, &reevev1.GetTaskRequest{Namespace: r.namespace, TaskId: r.id})
	if err != nil {
		return nil, fmt.Errorf("client: get task %s: %w", r.id, err)
	}
	return resp.GetTask(), nil
}

// Wait blocks until the task is terminal and returns it. For a task that
// did not succeed (FAILED, COMPENSATED, CANCELED) it returns the task and a
// *TaskError. It fails otherwise only when ctx ends or the scheduler cannot
// be reached for long (see Watch).
func (r *Run) Wait(ctx context.Context) (*reevev1.Task, error) {
	var last *reevev1.Task
	for t, err := range r.Watch(ctx) {
		if err != nil {
			return last, err
		}
		last = t
	}
	if last.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		return last, newTaskError(last)
	}
	return last, nil
}

// Get waits for the task like Wait, then decodes its output into out: a
// JSON object of the outputs of its steps keyed by step name, such as
// {"book_flight": {"booking": "F-1"}, "book_hotel": {...}}; out is usually
// a struct with a field per step of interest (see StepOutput for one
// step). A task that did not succeed returns its *TaskError and leaves out
// alone.
func (r *Run) Get(ctx context.Context, out any) error {
	t, err := r.Wait(ctx)
	if err != nil {
		return err
	}
	return Outputs(t, out)
}

// Cancel stops the task if it is not terminal: running steps are told to
// cancel, pending ones never start, and steps that succeeded and declare a
// compensation are undone in reverse order (the task ends COMPENSATED; with
// nothing to undo, CANCELED). A task already compensating finishes its undo.
// Canceling a terminal task changes nothing. reason ("" for none) is
// recorded in the task's history. NoCompensate ends the task CANCELED at
// once without undoing anything.
func (r *Run) Cancel(ctx context.Context, reason string, opts ...CancelOption) (*reevev1.Task, error) {
	req := &reevev1.CancelTaskRequest{Namespace: r.namespace, TaskId: r.id, Reason: reason}
	for _, o := range opts {
		o(req)
	}
	resp, err := r.c.scheduler.CancelTask(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("client: cancel task %s: %w", r.id, err)
	}
	return resp.GetTask(), nil
}

// Watch streams the task's states: its current state first, then a state
// on every change, ending after a terminal state (see IsTerminal). A
// consumer that reads slower than the task changes gets the newest state,
// not every state in between; the terminal state is always seen. When the
// stream breaks (a scheduler restarts or fails over) Watch opens it again
// and goes on, skipping a state it already yielded; it gives up, yielding
// the error, after maxWatchFailures breaks in a row without a state, or at
// once on an error that retrying cannot fix (NOT_FOUND, PERMISSION_DENIED,
// ctx ended). The iterator yields (nil, err) at most once, last.
func (r *Run) Watch(ctx context.Context) iter.Seq2[*reevev1.Task, error] {
	return func(yield func(*reevev1.Task, error) bool) {
		var last *reevev1.Task
		failures := 0
		for {
			err := r.watchOnce(ctx, &last, &failures, yield)
			if err == errStop || (err == nil && IsTerminal(last.GetState())) {
				return
			}
			if err == nil {
				err = io.ErrUnexpectedEOF // the stream ended before a terminal state
			}
			failures++
			if ctx.Err() != nil || !resumable(err) || failures >= maxWatchFailures {
				yield(nil, fmt.Errorf("client: watch task %s: %w", r.id, err))
				return
			}
			if !sleep(ctx, watchBackoff(err, failures)) {
				yield(nil, fmt.Errorf("client: watch task %s: %w", r.id, ctx.Err()))
				return
			}
		}
	}
}

// maxWatchFailures is how many times in a row Watch opens a broken stream
// again without receiving a state before it gives up: with its backoff
// (100ms doubling up to 5s) about half a minute.
const maxWatchFailures = 10

// errStop says the consumer stopped the iteration.
var errStop = errors.New("stopped")

// watchOnce reads one WatchTask stream into yield, updating last and
// resetting failures on each new state. It returns nil when the stream
// ended cleanly, errStop when yield asked to stop.
func (r *Run) watchOnce(ctx context.Context, last **reevev1.Task, failures *int, yield func(*reevev1.Task, error) bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := r.c.scheduler.WatchTask(ctx, &reevev1.WatchTaskRequest{Namespace: r.namespace, TaskId: r.id})
	if err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		t := resp.GetTask()
		*failures = 0
		if *last != nil && proto.Equal(*last, t) {
			continue // the first state of a resumed stream, seen already
		}
		*last = t
		if !yield(t, nil) {
			return errStop
		}
		if IsTerminal(t.GetState()) {
			return nil
		}
	}
}

// resumable reports whether a broken watch is worth opening again.
func resumable(err error) bool {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unknown:
		return true
	}
	return false
}

// watchBackoff is the wait before opening a watch again after failures
// breaks in a row: the scheduler's RetryInfo delay when it gave one, else
// 100ms doubling up to 5s.
func watchBackoff(err error, failures int) time.Duration {
	if d, ok := retryinfo.Delay(err); ok {
		return d
	}
	return min(100*time.Millisecond<<(failures-1), 5*time.Second)
}

// sleep waits d, false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// CancelOption changes what Run.Cancel asks for.
type CancelOption func(*reevev1.CancelTaskRequest)

// NoCompensate cancels without undoing: the task ends CANCELED at once, and
// its succeeded steps stay done (CompensateTask can undo them later).
func NoCompensate() CancelOption {
	return func(r *reevev1.CancelTaskRequest) { r.NoCompensate = true }
}
