// Package taskstate holds every transition of a task and its steps as pure
// functions on a *reevev1.Task. Nothing here does I/O: the scheduler loads a
// task record, applies one transition to a copy, and the store writes it
// back in one etcd transaction guarded by the record's mod revision.
//
// Step life cycle (forward):
//
//	PENDING (waiting for dependencies)
//	  -> PENDING, queued (ready_time set; not_before for backoff;
//	     schedule_to_start_deadline when the step has a schedule-to-start timeout)
//	  -> RUNNING (claimed: locked_by, complete_by)
//	     or, past schedule_to_start_deadline, expired like a dispatched attempt
//	  -> SUCCEEDED | PENDING queued with attempt+1 (retry) | FAILED | CANCELED
//	PENDING -> SKIPPED when the task ends before the step ran.
//
// Compensation reuses the step's execution fields: SUCCEEDED -> COMPENSATING
// (queued, then dispatched with its own complete_by) -> COMPENSATED, or
// FAILED when the compensation exhausts its attempts. Attempt numbers only
// grow, so (task, step, attempt) names exactly one execution.
//
// Retries: NextAttempt (retrydecision.go) alone decides what follows an
// attempt that ended without a success (an agent's failure, an expiry) or
// an operator's retry: which retry policy applies, whether another attempt
// is allowed, its backoff, or the escalation.
package taskstate
