package verify

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// KindLimitExceeded: an attempt of a step type with a max_running limit
// (QueueService) started while the limit's number of attempts of that type
// already ran, judged from the attempt history of the tasks in etcd.
const KindLimitExceeded = "limit_exceeded"

// limitCheck reconstructs, for each step type with a max_running limit,
// when its attempts ran (history: from "step.dispatched" or
// "compensation.dispatched" to the event that ended the attempt), and
// reports every start after the limit was last set at which more than the
// limit ran, counting the start. Starts before the limit was set are not
// judged (a lowered limit lets the attempts running finish). History times
// are the schedulers' clocks: on several machines, a skew between them can
// make a start look earlier than the end it followed. Only tasks still in
// etcd are seen (not the archive's), and a record whose oldest history was
// dropped (history_dropped) misses those attempts.
type limitCheck struct {
	limits map[string]*reevev1.QueueConfig // "<ns>/<type>"
	runs   map[string][]run
}

// run is one attempt's time running; end zero: still running. slot is
// the max_running slot its claim took (HistoryEvent.slot; 0: none known).
type run struct {
	start, end time.Time
	ns, id     string
	slot       int32
}

// loadLimits reads the types with a max_running limit at the check's
// revision.
func (ck *checker) loadLimits(ctx context.Context) error {
	resp, err := ck.c.Get(ctx, ck.opts.Prefix+"queues/", clientv3.WithPrefix(), clientv3.WithRev(ck.rev))
	if err != nil {
		return fmt.Errorf("verify: read queue limits: %w", err)
	}
	ck.lim = &limitCheck{limits: map[string]*reevev1.QueueConfig{}, runs: map[string][]run{}}
	for _, kv := range resp.Kvs {
		cfg := &reevev1.QueueConfig{}
		if err := proto.Unmarshal(kv.Value, cfg); err != nil {
			ck.add(Violation{Kind: KindUndecodable, Key: string(kv.Key), Detail: err.Error()})
			continue
		}
		if cfg.GetMaxRunning() > 0 {
			ck.lim.limits[strings.TrimPrefix(string(kv.Key), ck.opts.Prefix+"queues/")] = cfg
		}
	}
	return nil
}

// attemptEnds are the history kinds that end a step's attempt (of the
// same step and attempt), and taskEnds those that end every running one.
var (
	attemptEnds = map[string]bool{"step.succeeded": true, "step.failed": true, "step.expired": true, "step.unacknowledged": true,
		"step.retried_by_operator": true, "step.agent_forgot": true, "step.escalated": true,
		"step.deferred":          true, // a deferred attempt holds no slot
		"compensation.succeeded": true, "compensation.failed": true}
	// task.compensating: the task's undo starts by canceling every
	// dispatched execution (taskstate.stopSteps); the compensations it
	// then dispatches start runs of their own.
	taskEnds = map[string]bool{"task.canceled": true, "task.failed": true, "task.succeeded": true, "task.compensated": true,
		"task.compensating": true}
)

// collect records the runs of t's attempts of limited types.
func (lc *limitCheck) collect(t *reevev1.Task) {
	if lc == nil || len(lc.limits) == 0 {
		return
	}
	type open struct {
		key   string
		start time.Time
		slot  int32
	}
	running := map[string]open{} // "<step>/<attempt>"
	hist := t.GetHistory()
	for _, e := range hist {
		at := e.GetTime().AsTime()
		switch {
		case e.GetKind() == "step.dispatched" || e.GetKind() == "compensation.dispatched":
			spec := taskstate.Spec(t, e.GetStep())
			typ := spec.GetType()
			if e.GetKind() == "compensation.dispatched" {
				typ = spec.GetCompensation().GetType()
			}
			key := t.GetNamespace() + "/" + typ
			if lc.limits[key] == nil {
				continue
			}
			// A step's earlier attempt ends when its next one starts.
			for rk, o := range running {
				if strings.HasPrefix(rk, e.GetStep()+"/") {
					lc.runs[o.key] = append(lc.runs[o.key], run{start: o.start, end: at, ns: t.GetNamespace(), id: t.GetId(), slot: o.slot})
					delete(running, rk)
				}
			}
			running[fmt.Sprintf("%s/%d", e.GetStep(), e.GetAttempt())] = open{key, at, e.GetSlot()}
		case attemptEnds[e.GetKind()]:
			rk := fmt.Sprintf("%s/%d", e.GetStep(), e.GetAttempt())
			if o, ok := running[rk]; ok {
				lc.runs[o.key] = append(lc.runs[o.key], run{start: o.start, end: at, ns: t.GetNamespace(), id: t.GetId(), slot: o.slot})
				delete(running, rk)
			}
		case taskEnds[e.GetKind()]:
			for rk, o := range running {
				lc.runs[o.key] = append(lc.runs[o.key], run{start: o.start, end: at, ns: t.GetNamespace(), id: t.GetId(), slot: o.slot})
				delete(running, rk)
			}
		}
	}
	for _, o := range running {
		lc.runs[o.key] = append(lc.runs[o.key], run{start: o.start, ns: t.GetNamespace(), id: t.GetId(), slot: o.slot})
	}
}

// check reports the starts at which a limit was exceeded.
func (ck *checker) checkLimits() {
	lc := ck.lim
	if lc == nil {
		return
	}
	for key, runs := range lc.runs {
		cfg := lc.limits[key]
		since := cfg.GetUpdateTime().AsTime()
		type edge struct {
			at    time.Time
			start bool
			i     int // the run's index in runs
		}
		var edges []edge
		for i, r := range runs {
			edges = append(edges, edge{at: r.start, start: true, i: i})
			if !r.end.IsZero() {
				edges = append(edges, edge{at: r.end, i: i})
			}
		}
		// Ends before starts at the same time.
		slices.SortFunc(edges, func(a, b edge) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			switch {
			case a.start == b.start:
				return 0
			case !a.start:
				return -1
			}
			return 1
		})
		// What runs at a start: the attempts started and not ended, where
		// those that held the same slot count once. Event times are taken
		// before their writes commit, so a start can look a moment earlier
		// than the end of the attempt whose slot it took; two holders of
		// one slot never ran at once (the slot key's compare).
		open := map[int]bool{}
		for _, e := range edges {
			if !e.start {
				delete(open, e.i)
				continue
			}
			open[e.i] = true
			n, slots := 0, map[int32]bool{}
			for i := range open {
				if s := runs[i].slot; s > 0 {
					if slots[s] {
						continue
					}
					slots[s] = true
				}
				n++
			}
			if n > int(cfg.GetMaxRunning()) && !e.at.Before(since) {
				ns, typ, _ := strings.Cut(key, "/")
				ck.add(Violation{Kind: KindLimitExceeded, Namespace: ns, TaskID: runs[e.i].id,
					Detail: fmt.Sprintf("an attempt of %s started at %s with %d running; max_running is %d", typ, e.at.Format(time.RFC3339Nano), n, cfg.GetMaxRunning())})
			}
		}
	}
}

// parseKey is parseIndexKey, also for the flow-control indexes, whose
// task is named by the value (slots/, keyslots/: "<task-id>/<step>/<attempt>";
// taskslots/: the task id) or the key (keywait/):
//
//	slots/<ns>/<type>/<slot>
//	keyslots/<ns>/<workflow>/<step>/<hash>/<slot>
//	taskslots/<ns>/<workflow>/<hash>/<slot>
//	keywait/<ns>/<workflow>/<hash>/<created>/<task-id>
func parseKey(idx, rest string, value []byte) (ns, id string, ok bool) {
	p := strings.Split(rest, "/")
	switch {
	case idx == "slots/" && len(p) == 3, idx == "keyslots/" && len(p) == 5:
		id, _, _ = strings.Cut(string(value), "/")
		return p[0], id, id != ""
	case idx == "taskslots/" && len(p) == 4:
		return p[0], string(value), len(value) > 0
	case idx == "keywait/" && len(p) == 5:
		return p[0], p[4], true
	case idx == "slots/", idx == "keyslots/", idx == "taskslots/", idx == "keywait/":
		return "", "", false
	}
	return parseIndexKey(idx, rest)
}
