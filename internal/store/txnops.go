package store

import (
	"fmt"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// etcd's limit on the operations of a transaction (--max-txn-ops, 128 by
// default), as etcd 3.7 checks it (server/etcdserver/api/v3rpc/key.go,
// checkTxnRequest): the longest of a transaction's If, Then and Else lists
// may hold at most the limit; a nested transaction in one of those lists is
// checked the same way against the limit minus the outer transaction's
// longest list. So a group commit of n nested task writes fits when
//
//	n + max over the writes of max(len(If), len(Then), len(Else)) <= limit
//
// and a write committed alone, as a plain transaction, fits when its
// longest list holds at most the limit.
const (
	// DefaultMaxTxnOps is etcd's default --max-txn-ops.
	DefaultMaxTxnOps = 128
	// minTxnOps is the least limit the store works with: a one-step task's
	// writes need about 8 operations.
	minTxnOps = 16
	// fixedTxnOps bounds the operations of a task write that do not depend
	// on the number of steps it moves: the record; the two created keys
	// that name the state (created-state, created-wf-state), each a delete
	// and a put when the state changes; its ended key; an alert; the range
	// delete of its ready keys; the acting step's own deadline and beating
	// keys: 10. It stays 12, the bound of the layout before issue 15 (with
	// a states/ key moved too), so that a workflow this scheduler accepts
	// can still be written by an older one during an upgrade.
	fixedTxnOps = 12
)

// nops is the length of a write's longest list: If (its compare, and the
// workflow compare of CreateTaskOfLatest or the fences), Then (record and
// index diff) and Else (one read).
func (r *writeReq) nops() int {
	n := max(len(r.ops), 1)
	if r.create != nil {
		if r.absent != "" {
			return max(n, 2)
		}
		return n
	}
	return max(n, 1+len(r.fences))
}

// WorstCaseOps bounds the operations of any one write of a task running w:
// each queued step has two index keys (ready, and deadline when it has a
// schedule-to-start timeout, 1h by default), and one transition can at
// most drop every queued or running forward step (an antichain of the
// dependency order, so at most its width W) and queue the compensations of
// a set of steps none of which depends on another (at most Wc, the width
// among steps with a compensation); a step that completes queues at most W
// dependents. So 2·W + 2·Wc + fixedTxnOps.
func WorstCaseOps(w *reevev1.Workflow) (ops, width, compWidth int) {
	width = workflow.Width(w, nil)
	compWidth = workflow.Width(w, func(s *reevev1.StepSpec) bool { return s.GetCompensation() != nil })
	return 2*width + 2*compWidth + fixedTxnOps, width, compWidth
}

// MaxTxnOps is etcd's per-transaction operation limit the store works with.
func (s *Store) MaxTxnOps() int { return s.maxTxnOps }

// CheckWorkflowOps refuses (with a workflow.FieldError on field+".steps") a
// workflow one of whose transitions could need more operations than etcd
// allows in a transaction: such a task could be created but then neither
// advance nor be canceled. A record and its index changes must be one
// transaction (split across two, a crash between them leaves a queued step
// without a ready key, or a ready key for a step that is not queued), so the
// only remedy is a narrower workflow or a higher etcd limit.
func (s *Store) CheckWorkflowOps(field string, w *reevev1.Workflow) error {
	ops, width, compWidth := WorstCaseOps(w)
	if ops <= s.maxTxnOps {
		return nil
	}
	return &workflow.FieldError{Field: field + ".steps", Reason: fmt.Sprintf(
		"up to %d steps can be queued or running at once and %d compensations queued at once; one transition of such a task could need %d etcd operations (2 per queued step + 2 per queued compensation + %d), more than etcd's limit of %d operations per transaction (etcd --max-txn-ops; see docs/limits.md): make the workflow narrower (2·width + 2·compensable width ≤ %d)",
		width, compWidth, ops, fixedTxnOps, s.maxTxnOps, s.maxTxnOps-fixedTxnOps)}
}
