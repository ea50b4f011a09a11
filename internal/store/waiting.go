package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// The waiting index (issue 35): one key per step that waits for a
// completion from outside — WAITING for an external completion, or RUNNING
// and deferred by its agent (taskstate.Awaiting) — by namespace, oldest
// wait first:
//
//	waiting/<ns>/<since %020d>/<task-id>/<step>   "<attempt> <complete-by unix ns> <e|d> <workflow>"
//
// where since is when the wait began (Step.wait_start_time) and e/d says
// external or deferred. Like every index it is a pure function of the
// record (appendIndexKeys), written in the record's transaction. It serves
// the list of steps an approver may complete (ListWaitingSteps, the
// console's Waiting view) and the count of waiting steps, in O(waiting),
// never a scan of the tasks.

func (k keys) waitingPrefix() string      { return k.prefix + "waiting/" }
func (k keys) waitingOf(ns string) string { return k.waitingPrefix() + ns + "/" }
func (k keys) waitingKey(ns string, since time.Time, id, step string) string {
	b := make([]byte, 0, len(k.prefix)+len(ns)+len(id)+len(step)+40)
	b = append(b, k.waitingOf(ns)...)
	b = appendTime(b, since.UnixNano())
	b = append(b, '/')
	b = append(b, id...)
	b = append(b, '/')
	return string(append(b, step...))
}

// waitingIndex returns the waiting key and value step s of t implies, if
// it waits for a completion from outside.
func (k keys) waitingIndex(t *reevev1.Task, s *reevev1.Step) (indexKey, bool) {
	if taskstate.TerminalTask(t.GetState()) || !taskstate.Awaiting(t, s) || s.GetWaitStartTime() == nil {
		return indexKey{}, false
	}
	kind := "e"
	if s.GetDeferred() {
		kind = "d"
	}
	val := strconv.FormatInt(int64(s.GetAttempt()), 10) + " " + strconv.FormatInt(s.GetCompleteBy().AsTime().UnixNano(), 10) + " " + kind + " " + t.GetWorkflow().GetName()
	return indexKey{k.waitingKey(t.GetNamespace(), s.GetWaitStartTime().AsTime(), t.GetId(), s.GetName()), val}, true
}

// WaitingStep is one entry of the waiting index.
type WaitingStep struct {
	Namespace, TaskID, Step, Workflow string
	Attempt                           int32
	Since, CompleteBy                 time.Time
	Deferred                          bool
	// Cursor continues a listing after this entry (WaitingSteps' after).
	Cursor string
}

// WaitingSteps lists the namespace's steps that wait for a completion from
// outside, oldest wait first: at most limit, after the cursor after ("":
// from the start). next is the cursor to continue from, "" at the end.
func (s *Store) WaitingSteps(ctx context.Context, ns, after string, limit int) (steps []WaitingStep, next string, err error) {
	prefix := s.k.waitingOf(ns)
	from := prefix
	if after != "" {
		from = prefix + after + "\x00"
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, from, clientv3.WithRange(prefixEnd(prefix)), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, "", etcdErr(ctx, "list waiting steps", err)
	}
	for _, kv := range resp.Kvs {
		w, err := parseWaiting(ns, strings.TrimPrefix(string(kv.Key), prefix), string(kv.Value))
		if err != nil {
			continue // not a key this Reeve writes; reeve verify reports it
		}
		steps = append(steps, w)
	}
	if resp.More && len(resp.Kvs) > 0 {
		next = strings.TrimPrefix(string(resp.Kvs[len(resp.Kvs)-1].Key), prefix)
	}
	return steps, next, nil
}

// CountWaiting counts the namespace's steps that wait for a completion
// from outside (a count-only range of the waiting index).
func (s *Store) CountWaiting(ctx context.Context, ns string) (int64, error) {
	prefix := s.k.waitingOf(ns)
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, prefix, clientv3.WithRange(prefixEnd(prefix)), clientv3.WithCountOnly(), clientv3.WithSerializable())
	if err != nil {
		return 0, etcdErr(ctx, "count waiting steps", err)
	}
	return resp.Count, nil
}

func parseWaiting(ns, rest, val string) (WaitingStep, error) {
	p := strings.Split(rest, "/")
	v := strings.SplitN(val, " ", 4)
	if len(p) != 3 || len(v) != 4 {
		return WaitingStep{}, fmt.Errorf("store: malformed waiting key %q", rest)
	}
	since, err1 := strconv.ParseInt(p[0], 10, 64)
	attempt, err2 := strconv.ParseInt(v[0], 10, 32)
	by, err3 := strconv.ParseInt(v[1], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return WaitingStep{}, fmt.Errorf("store: malformed waiting key %q", rest)
	}
	return WaitingStep{Namespace: ns, TaskID: p[1], Step: p[2], Workflow: v[3], Attempt: int32(attempt),
		Since: time.Unix(0, since), CompleteBy: time.Unix(0, by), Deferred: v[2] == "d", Cursor: rest}, nil
}
