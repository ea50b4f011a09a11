package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
)

// historyPager keeps the whole history of the tasks under a key prefix (the
// wide tasks, whose history outgrows the taskstate.MaxHistory events a
// record keeps): it watches every version of their records from a revision
// on and files each event under its position in the task's history
// (history_dropped + index), which older versions still hold.
type historyPager struct {
	cli    *clientv3.Client
	prefix string

	mu     sync.Mutex
	events map[string]map[int]*reevev1.HistoryEvent
	errs   []string // watch errors (e.g. compacted): versions may be missing
}

func newHistoryPager(cli *clientv3.Client, prefix string) *historyPager {
	return &historyPager{cli: cli, prefix: prefix, events: map[string]map[int]*reevev1.HistoryEvent{}}
}

// run watches from rev on until ctx ends. The client resumes a broken watch
// where it stopped (etcd members are killed meanwhile), and so does run
// after any other watch error; a watch canceled by a compaction is
// restarted at the current revision and noted: the check then finds the
// gap.
func (h *historyPager) run(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		wch := h.cli.Watch(ctx, h.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
		for resp := range wch {
			if err := resp.Err(); err != nil {
				if resp.CompactRevision != 0 {
					h.mu.Lock()
					h.errs = append(h.errs, err.Error())
					h.mu.Unlock()
					rev = 0 // versions are lost: go on from the current revision
				}
				break // else resume where it stopped
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut {
					h.add(ev.Kv.Value)
				}
				rev = ev.Kv.ModRevision + 1
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // before watching again
		}
	}
}

func (h *historyPager) add(val []byte) {
	var rec storev1.TaskRecord
	if store.UnmarshalRecord(val, &rec) != nil {
		return // the checker reports undecodable records
	}
	h.addTask(rec.GetTask())
}

func (h *historyPager) addTask(t *reevev1.Task) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.events[t.GetId()]
	if m == nil {
		m = map[int]*reevev1.HistoryEvent{}
		h.events[t.GetId()] = m
	}
	base := int(t.GetHistoryDropped())
	for i, ev := range t.GetHistory() {
		m[base+i] = ev
	}
}

// full returns t with its whole history when t dropped events and every
// one of them was seen; otherwise t itself, and why not.
func (h *historyPager) full(t *reevev1.Task) (*reevev1.Task, string) {
	if t.GetHistoryDropped() == 0 {
		return t, ""
	}
	h.addTask(t)
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.events[t.GetId()]
	n := int(t.GetHistoryDropped()) + len(t.GetHistory())
	all := make([]*reevev1.HistoryEvent, 0, n)
	for i := range n {
		ev, ok := m[i]
		if !ok {
			return t, fmt.Sprintf("event %d of %d never seen by the history watch (watch errors: %v)", i, n, h.errs)
		}
		all = append(all, ev)
	}
	out := proto.Clone(t).(*reevev1.Task)
	out.History, out.HistoryDropped = all, 0
	return out, ""
}
