package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// MaxTaskRecordBytes bounds a task record in etcd (store.MaxRecordBytes). A
// step output that would push a task past it fails the step with the
// non-retryable code "output_too_large"; text that grows a record past it
// later (failure messages, reasons) is shortened by the store.
const MaxTaskRecordBytes = store.MaxRecordBytes

// resultRetryWindow bounds how long a result is retried while etcd is
// unavailable, when the attempt's complete-by is not known here.
const resultRetryWindow = 30 * time.Second

// handleResult applies a result from conn's agent in one task write
// (engine.update), claiming the next due step in the same write when it
// can (claim.go), and returns the ack. The write is retried while etcd is
// unavailable, until resultDeadline. It is fenced by (task, step, attempt,
// agent): a result for any other execution changes nothing and is answered
// FAILED_PRECONDITION.
func (a *agents) handleResult(conn *agentConn, res *reevev1.StepResult) *reevev1.ResultAck {
	ref := res.GetRef()
	ack := &reevev1.ResultAck{Ref: ref}
	reject := func(err error) *reevev1.ResultAck {
		ack.Status = withRequest(toStatus(err), ref).Proto()
		return ack
	}
	if n := proto.Size(res.GetOutput()); n > workflow.MaxOutputBytes && workflow.ValidateStepRef("result.ref", ref) == nil {
		// Refused on its own, and the step fails for good: the same output
		// would be too large on every attempt.
		failed := a.handleResult(conn, &reevev1.StepResult{Ref: ref, Outcome: &reevev1.StepResult_Error{Error: &reevev1.StepError{
			Code: "output_too_large", NonRetryable: true,
			Message: fmt.Sprintf("output of %d bytes is over the %d-byte limit", n, workflow.MaxOutputBytes),
		}}})
		if !failed.GetAccepted() {
			return failed
		}
		return reject(status.Errorf(codes.InvalidArgument, "result.output: %d bytes is over the %d-byte limit; the step failed with the non-retryable code output_too_large", n, workflow.MaxOutputBytes))
	}
	if err := workflow.ValidateStepResult(res); err != nil {
		return reject(err)
	}
	if len(res.GetDeferred().GetReason()) > workflow.MaxReasonBytes {
		return reject(&workflow.FieldError{Field: "result.deferred.reason", Reason: fmt.Sprintf("longer than %d bytes", workflow.MaxReasonBytes)})
	}
	if ref.GetNamespace() != conn.ns {
		return reject(status.Errorf(codes.PermissionDenied, "ref.namespace: agent is registered in namespace %q", conn.ns))
	}
	// Built only to log a refusal: a logger With attributes is several
	// allocations (and, for the JSON and text handlers, their encoding) per
	// result.
	log := func() *slog.Logger {
		return a.log.With("task_id", ref.GetTaskId(), "step", ref.GetStep(), "attempt", ref.GetAttempt(), "agent_id", conn.agentID)
	}

	// Read before the write: releaseRef forgets them.
	details := a.disp.heartbeatDetails(conn, ref)
	record := func(t *reevev1.Task, now time.Time) error {
		if err := checkNotLate(t, ref, conn.agentID, now); err != nil {
			return err
		}
		if d := res.GetDeferred(); d != nil { // a hand-off (completion.go)
			return taskstate.Defer(t, ref, conn.agentID, d.GetReason(), now)
		}
		if res.GetError() != nil {
			if err := taskstate.Fail(t, ref, conn.agentID, res.GetError(), now); err != nil {
				return err
			}
			keepDetails(t, ref, details)
			return nil
		}
		if proto.Size(t)+proto.Size(res.GetOutput()) > MaxTaskRecordBytes {
			return taskstate.Fail(t, ref, conn.agentID, &reevev1.StepError{
				Code: "output_too_large", NonRetryable: true,
				Message: fmt.Sprintf("output of %d bytes does not fit the task record (limit %d bytes)", proto.Size(res.GetOutput()), MaxTaskRecordBytes),
			}, now)
		}
		return taskstate.Complete(t, ref, conn.agentID, res.GetOutput(), now)
	}

	deadline := a.resultDeadline(conn, ref)
	ctx, cancel := context.WithDeadline(a.base, deadline)
	_, err := a.eng.update(ctx, taskWrite{ns: ref.GetNamespace(), id: ref.GetTaskId(), claim: "claim with a result", until: deadline,
		change: func(t *reevev1.Task, now time.Time, claim *writeClaim) (effects, error) {
			err := claim.run(t, "", now, func() error { return record(t, now) })
			return effects{result: res, resultAgent: conn.agentID, revoke: "task " + t.GetState().String()}, err
		}})
	cancel()
	a.disp.releaseRef(conn.agentID, ref)
	if err != nil {
		if errors.Is(err, taskstate.ErrStale) || errors.Is(err, taskstate.ErrNotDeferrable) || errors.Is(err, taskstate.ErrTerminal) || errors.Is(err, taskstate.ErrUnknownStep) || errors.Is(err, store.ErrNotFound) {
			log().Info("stale result refused", "err", err)
			if errors.Is(err, store.ErrNotFound) { // FAILED_PRECONDITION like every stale result
				err = refuse(codes.FailedPrecondition, ReasonTaskNotFound, "%s", err.Error())
			}
			return reject(err)
		}
		a.logs.log(log(), slog.LevelWarn, "record result: "+errKind(err), "record result", "err", err)
		return reject(err)
	}
	ack.Accepted = true
	return ack
}

// resultDeadline is how long recording a result is retried while etcd is
// unavailable: until the attempt's complete-by when this scheduler
// dispatched it, else for a fixed window; never less than a few seconds, so
// that a late result is still judged (and refused).
func (a *agents) resultDeadline(conn *agentConn, ref *reevev1.StepRef) time.Time {
	by, ok := a.disp.runningUntil(conn, ref)
	now := time.Now()
	if !ok {
		return now.Add(resultRetryWindow)
	}
	if floor := now.Add(5 * time.Second); by.Before(floor) {
		return floor
	}
	return by
}

// LateResultGrace is how long after an attempt's complete-by its result is
// still accepted. Past it the result is refused (FAILED_PRECONDITION) even
// if the supervisor has not recovered the attempt yet: the scheduler judges
// expiry by its own clock in the transaction that would record the result,
// so how fast the supervisor drains a mass expiry does not decide whether a
// late result wins. The grace covers clock skew between the agent's host and
// the scheduler's and the supervisor's recovery target for a mass expiry
// (docs/architecture.md, Timing).
const LateResultGrace = time.Second

// checkNotLate refuses a result for the current attempt of a step that is
// past its complete-by by more than LateResultGrace at now. Anything else
// (another attempt, another agent, a step not dispatched) is left to the
// transition, which refuses it with its own reason.
func checkNotLate(t *reevev1.Task, ref *reevev1.StepRef, agentID string, now time.Time) error {
	st := taskstate.FindStep(t, ref.GetStep())
	if st == nil || !taskstate.Dispatched(st) || st.GetAttempt() != ref.GetAttempt() || st.GetLockedByAgent() != agentID || st.GetCompleteBy() == nil {
		return nil
	}
	if late := now.Sub(st.GetCompleteBy().AsTime()); late > LateResultGrace {
		return fmt.Errorf("result for attempt %d of step %q arrived %v after its complete-by %s (accepted up to %v after): the attempt has expired and will be retried: %w",
			ref.GetAttempt(), ref.GetStep(), late.Round(time.Millisecond), st.GetCompleteBy().AsTime().UTC().Format(time.RFC3339Nano), LateResultGrace, taskstate.ErrStale)
	}
	return nil
}
