package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// alertOps returns the write of a new alert when an update makes a task
// FAILED, so that the alert is durable exactly when the failure is; and,
// when an operator's action takes a FAILED task out of FAILED (RetryStep
// resumes it, CompensateTask undoes it), the write that marks that
// failure's alert resolved (resolveOp). rev is the task's revision before
// the update.
func (s *Store) alertOps(before, after *reevev1.Task, rev int64) []clientv3.Op {
	failed := func(t *reevev1.Task) bool { return t.GetState() == reevev1.TaskState_TASK_STATE_FAILED }
	switch {
	case failed(after) && !failed(before):
		a := alertOf(after)
		val, err := marshal(a)
		if err != nil {
			panic(err) // a well-formed message always marshals
		}
		return []clientv3.Op{clientv3.OpPut(s.k.alerts(a.GetNamespace())+a.GetId(), val)}
	case failed(before) && !failed(after):
		return s.resolveOp(before, after, rev)
	}
	return nil
}

// alertOf is the alert raised when t became FAILED.
func alertOf(t *reevev1.Task) *reevev1.Alert {
	return &reevev1.Alert{
		Namespace:  t.GetNamespace(),
		Id:         fmt.Sprintf("%020d-%s", t.GetEndTime().AsTime().UnixNano(), t.GetId()),
		TaskId:     t.GetId(),
		Step:       failedStep(t),
		Reason:     t.GetReason(),
		CreateTime: t.GetEndTime(),
	}
}

// resolveOp marks the alert of before's failure resolved by the operator
// action that made after (Alert.resolution and resolve_time), and
// acknowledged by the action's actor at that time. The write is
// conditional, in the task's transaction: only if the alert still exists
// (retention may have swept it) and was not changed since the task's last
// write (the failure that raised it, or a later write of the FAILED task):
// an alert an operator acknowledged since keeps that acknowledgement.
func (s *Store) resolveOp(before, after *reevev1.Task, rev int64) []clientv3.Op {
	a := alertOf(before)
	var actor string
	a.Resolution, actor, a.ResolveTime = resolution(after)
	a.Acknowledged, a.AcknowledgedBy, a.AckTime = true, truncateActor(actor), a.ResolveTime
	val, err := marshal(a)
	if err != nil {
		panic(err) // a well-formed message always marshals
	}
	key := s.k.alerts(a.GetNamespace()) + a.GetId()
	return []clientv3.Op{clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Version(key), ">", 0), clientv3.Compare(clientv3.ModRevision(key), "<", rev+1)},
		[]clientv3.Op{clientv3.OpPut(key, val)}, nil)}
}

// resolution names the operator action that took the task out of FAILED,
// from its history event ("retry_step of step \"ship\" by operator/alice",
// "compensate_task by operator"), its actor and its time.
func resolution(t *reevev1.Task) (what, actor string, at *timestamppb.Timestamp) {
	h := t.GetHistory()
	for i := len(h) - 1; i >= 0; i-- {
		switch e := h[i]; e.GetKind() {
		case "step.retried_by_operator":
			return fmt.Sprintf("retry_step of step %q by %s", e.GetStep(), e.GetActor()), e.GetActor(), e.GetTime()
		case "task.compensating":
			return "compensate_task by " + e.GetActor(), e.GetActor(), e.GetTime()
		}
	}
	return "an operator's action", "operator", timestamppb.Now()
}

// truncateActor keeps acknowledged_by within the 128 characters AckAlert
// accepts.
func truncateActor(s string) string {
	if len(s) <= 128 {
		return s
	}
	return strings.ToValidUTF8(s[:128], "")
}

// failedStep is the step that failed last, if any.
func failedStep(t *reevev1.Task) string {
	name := ""
	var last time.Time
	for _, st := range t.GetSteps() {
		if st.GetState() == reevev1.StepState_STEP_STATE_FAILED && !st.GetEndTime().AsTime().Before(last) {
			name, last = st.GetName(), st.GetEndTime().AsTime()
		}
	}
	return name
}

// ListAlerts returns up to limit alerts of a namespace, oldest first,
// starting after the alert id `after`.
func (s *Store) ListAlerts(ctx context.Context, ns string, includeAcked bool, after string, limit int) (alerts []*reevev1.Alert, more bool, err error) {
	prefix := s.k.alerts(ns)
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	start := rangeStart(prefix, after)
	for {
		resp, err := s.c.Get(octx, start, clientv3.WithRange(prefixEnd(prefix)), clientv3.WithLimit(int64(limit+1)))
		if err != nil {
			return nil, false, etcdErr(ctx, "list alerts", err)
		}
		for _, kv := range resp.Kvs {
			a, err := unmarshalAlert(kv)
			if err != nil {
				return nil, false, err
			}
			if a.GetAcknowledged() && !includeAcked {
				continue
			}
			if len(alerts) == limit {
				return alerts, true, nil
			}
			alerts = append(alerts, a)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return alerts, false, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// AckAlert marks an alert acknowledged by `by`. An alert of a version this
// Reeve does not know is left as it is (ErrUnknownVersion).
func (s *Store) AckAlert(ctx context.Context, ns, id, by string, now time.Time) (*reevev1.Alert, error) {
	key := s.k.alerts(ns) + id
	for range maxUpdateRetries {
		octx, cancel := s.opCtx(ctx)
		resp, err := s.c.Get(octx, key)
		cancel()
		if err != nil {
			return nil, etcdErr(ctx, "ack alert", err)
		}
		if len(resp.Kvs) == 0 {
			return nil, notFound(KindAlert, ns, id, "alert %q in namespace %q", id, ns)
		}
		a, err := unmarshalAlert(resp.Kvs[0])
		if err != nil {
			return nil, err
		}
		if v := unknownFieldVersion(a); !knownVersion(v) {
			return nil, s.unknownVersion("ack alert", &UnknownVersionError{Kind: KindAlert, Namespace: ns, Name: id, Key: key, Version: v})
		}
		if a.GetAcknowledged() {
			return a, nil
		}
		a.Acknowledged, a.AcknowledgedBy, a.AckTime = true, by, timestamppb.New(now)
		val, err := marshal(a)
		if err != nil {
			return nil, err
		}
		octx, cancel = s.opCtx(ctx)
		tr, err := s.c.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).Then(clientv3.OpPut(key, val)).Commit()
		cancel()
		if err != nil {
			return nil, etcdErr(ctx, "ack alert", err)
		}
		if tr.Succeeded {
			return a, nil
		}
	}
	return nil, fmt.Errorf("ack alert %s: %w", id, ErrConflict)
}

// alertPage is how many alerts WatchAlerts reads at a time.
var alertPage int64 = 500

// WatchAlerts calls fn with every unacknowledged alert of a namespace, then
// with every alert written later, until ctx ends or fn returns an error.
func (s *Store) WatchAlerts(ctx context.Context, ns string, fn func(*reevev1.Alert) error) error {
	prefix := s.k.alerts(ns)
	pending, rev, err := s.unacknowledgedAlerts(ctx, prefix)
	if err != nil {
		return err
	}
	for _, a := range pending {
		if err := fn(a); err != nil {
			return err
		}
	}
	for ctx.Err() == nil {
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range s.c.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if wr.Err() != nil {
				break // resume from the last revision seen
			}
			for _, ev := range wr.Events {
				rev = ev.Kv.ModRevision
				if ev.Type != mvccpb.PUT {
					continue
				}
				a, err := unmarshalAlert(ev.Kv)
				if err != nil {
					wcancel()
					return err
				}
				if err := fn(a); err != nil {
					wcancel()
					return err
				}
			}
		}
		wcancel()
	}
	return ctx.Err()
}

// unacknowledgedAlerts reads the alerts under prefix in pages of alertPage,
// all at one revision, and returns the unacknowledged ones and that
// revision: a namespace with many alerts holds one page and what is left
// to acknowledge, not every alert. A compaction during the read starts it
// again at a newer revision.
func (s *Store) unacknowledgedAlerts(ctx context.Context, prefix string) ([]*reevev1.Alert, int64, error) {
	for {
		var (
			pending []*reevev1.Alert
			rev     int64
		)
		for from := prefix; ; {
			opts := []clientv3.OpOption{clientv3.WithRange(prefixEnd(prefix)), clientv3.WithLimit(alertPage)}
			if rev > 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			octx, cancel := s.opCtx(ctx)
			resp, err := s.c.Get(octx, from, opts...)
			cancel()
			if errors.Is(err, rpctypes.ErrCompacted) {
				break
			}
			if err != nil {
				return nil, 0, etcdErr(ctx, "watch alerts", err)
			}
			if rev == 0 {
				rev = resp.Header.Revision
			}
			for _, kv := range resp.Kvs {
				a, err := unmarshalAlert(kv)
				if err != nil {
					return nil, 0, err
				}
				if !a.GetAcknowledged() {
					pending = append(pending, a)
				}
			}
			if !resp.More || len(resp.Kvs) == 0 {
				return pending, rev, nil
			}
			from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
}

func unmarshalAlert(kv *mvccpb.KeyValue) (*reevev1.Alert, error) {
	a := &reevev1.Alert{}
	if err := proto.Unmarshal(kv.Value, a); err != nil {
		return nil, fmt.Errorf("store: decode %s: %w", strings.TrimSpace(string(kv.Key)), err)
	}
	return a, nil
}
