package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Flow control (issue 36) lives in two key families (keys.go lists them):
//
//	queues/<ns>/<type>                 reeve.v1.QueueConfig: a step type's limits and pause
//	slots/<ns>/<type>/<slot:%06d>      "<task-id>/<step>/<attempt>": a max_running slot held by
//	                                   a dispatched attempt; derived from the task record
//	                                   (index.go) like every index
//
// A slot key is a pure function of the record: it exists while the step's
// current attempt is dispatched with Step.slot set, so it is written by the
// claim that takes the slot and deleted by whatever write ends the attempt
// (a result, a recovery, a take-back, a cancel), in that write's
// transaction. The claim's transaction also compares that the slot key is
// absent and that no slot above the limit it claimed under
// (Step.slot_limit) is held: two schedulers never hold the same slot, and
// the slots held never number more than the limit (slotCmps).

// ErrSlotTaken means a claim lost its max_running slot to another claim (or
// the type holds slots above the limit the claim saw): nothing was written.
var ErrSlotTaken = fmt.Errorf("store: max_running slot taken: %w", ErrConflict)

func (k keys) queue(ns, typ string) string { return k.prefix + "queues/" + ns + "/" + typ }
func (k keys) queuesPrefix() string        { return k.prefix + "queues/" }
func (k keys) slotsPrefix() string         { return k.prefix + "slots/" }
func (k keys) slotsOf(ns, typ string) string {
	return k.prefix + "slots/" + ns + "/" + typ + "/"
}
func (k keys) slot(ns, typ string, slot int32) string {
	return fmt.Sprintf("%s%06d", k.slotsOf(ns, typ), slot)
}
func (k keys) schedulersPrefix() string { return k.prefix + "schedulers/" }
func (k keys) keySlotsPrefix() string   { return k.prefix + "keyslots/" }

// keySlotsOf is the prefix of the slots of one concurrency key, id as
// KeyID gives it, in namespace ns.
func (k keys) keySlotsOf(ns, id string) string { return k.prefix + "keyslots/" + ns + "/" + id + "/" }
func (k keys) keySlot(ns, id string, slot int32) string {
	return fmt.Sprintf("%s%06d", k.keySlotsOf(ns, id), slot)
}

func (k keys) taskSlotsPrefix() string { return k.prefix + "taskslots/" }
func (k keys) keyWaitPrefix() string   { return k.prefix + "keywait/" }
func (k keys) taskSlotsOf(ns, id string) string {
	return k.prefix + "taskslots/" + ns + "/" + id + "/"
}
func (k keys) taskSlot(ns, id string, slot int32) string {
	return fmt.Sprintf("%s%06d", k.taskSlotsOf(ns, id), slot)
}
func (k keys) keyWait(ns, id string, created int64, taskID string) string {
	return fmt.Sprintf("%skeywait/%s/%s/%020d/%s", k.prefix, ns, id, created, taskID)
}

// TaskKeyID names the slots of a task's workflow concurrency key: live
// tasks of one workflow per key value, "<workflow>/<hash>", with the key's
// max_running; "" when the workflow has none.
func TaskKeyID(t *reevev1.Task) (id string, limit int32) {
	c := t.GetWorkflow().GetConcurrency()
	if c == nil {
		return "", 0
	}
	sum := sha256.Sum256([]byte(t.GetConcurrencyKey()))
	return t.GetWorkflow().GetName() + "/" + hex.EncodeToString(sum[:8]), c.GetMaxRunning()
}

// KeyID names the slots of a step's concurrency key: running attempts of
// one step of one workflow, per key value, "<workflow>/<step>/<hash>" (the
// value's SHA-256, 16 hex digits: a value may hold any character), with the
// key's max_running. "" when the step has no key, or its current
// execution is a compensation (which the key does not count).
func KeyID(t *reevev1.Task, s *reevev1.Step) (id string, limit int32) {
	c := taskstate.Spec(t, s.GetName()).GetConcurrency()
	if c == nil || taskstate.Compensating(s) {
		return "", 0
	}
	sum := sha256.Sum256([]byte(s.GetConcurrencyKey()))
	return t.GetWorkflow().GetName() + "/" + s.GetName() + "/" + hex.EncodeToString(sum[:8]), c.GetMaxRunning()
}

// HoldsKeySlot reports whether a step's current attempt holds a slot of
// its concurrency key: while running on an agent (a compensation does not,
// nor a step its agent deferred to an external completion).
func HoldsKeySlot(s *reevev1.Step) bool {
	return s.GetKeySlot() > 0 && s.GetState() == reevev1.StepState_STEP_STATE_RUNNING && !s.GetDeferred()
}

// HoldsSlot reports whether a step's current attempt holds its max_running
// slot: while dispatched to an agent. A step its agent deferred (handed off
// to an external completion, issue 35) holds none: the deferral's write
// deletes its slot key.
func HoldsSlot(s *reevev1.Step) bool {
	return s.GetSlot() > 0 && taskstate.Dispatched(s) && !s.GetDeferred()
}

// slotDeadline reports whether a step's complete-by is indexed by its
// max_running slot key rather than a deadline key: while its attempt holds
// the slot its claim took (Step.slot_deadline). The slot key's value is
// then "<task-id>/<step>/<attempt> <complete-by, Unix ns>", and the
// supervisor follows slots/ as a second deadline index (SlotDeadlines):
// the key a limit needs anyway serves both, so a limit costs no etcd
// operation per attempt beyond what the attempt costs without one.
func slotDeadline(s *reevev1.Step) bool {
	return s.GetSlotDeadline() && HoldsSlot(s) && s.GetCompleteBy() != nil
}

// appendSlotKeys appends the slot keys a task record implies.
func (k keys) appendSlotKeys(dst []indexKey, t *reevev1.Task) []indexKey {
	// A live task of a workflow with a concurrency key holds a slot of its
	// key, or waits for one, in submission order.
	// A task waiting for its start time with no slot neither holds nor
	// waits for one (taskstate.KeyWaiting): it queues when it starts.
	if id, _ := TaskKeyID(t); id != "" && !taskstate.TerminalTask(t.GetState()) {
		if t.GetKeySlot() > 0 {
			dst = append(dst, indexKey{k.taskSlot(t.GetNamespace(), id, t.GetKeySlot()), t.GetId()})
		} else if t.GetCreateTime() != nil && taskstate.KeyWaiting(t) {
			_, limit := TaskKeyID(t)
			dst = append(dst, indexKey{k.keyWait(t.GetNamespace(), id, taskstate.KeyQueuedAt(t).UnixNano(), t.GetId()), strconv.Itoa(int(limit))})
		}
	}
	for _, s := range t.GetSteps() {
		if HoldsSlot(s) {
			val := t.GetId() + "/" + s.GetName() + "/" + strconv.Itoa(int(s.GetAttempt()))
			if slotDeadline(s) {
				val += " " + strconv.FormatInt(s.GetCompleteBy().AsTime().UnixNano(), 10)
			}
			dst = append(dst, indexKey{k.slot(t.GetNamespace(), taskstate.ExecutionType(t, s), s.GetSlot()), val})
		}
		if HoldsKeySlot(s) {
			if id, _ := KeyID(t, s); id != "" {
				dst = append(dst, indexKey{
					k.keySlot(t.GetNamespace(), id, s.GetKeySlot()),
					t.GetId() + "/" + s.GetName() + "/" + strconv.Itoa(int(s.GetAttempt())),
				})
			}
		}
	}
	return dst
}

// slotCmps returns the compares a write from before to after needs for the
// slots after takes that before did not hold: the slot key absent, and no
// slot above the step's slot_limit held (but for an adopted attempt's
// slot, whose slot_limit is 0). None for a write that takes no
// slot (every write of a type without a limit).
func (k keys) slotCmps(before, after *reevev1.Task) []clientv3.Cmp {
	var cmps []clientv3.Cmp
	if id, limit := TaskKeyID(after); id != "" && after.GetKeySlot() > 0 && !taskstate.TerminalTask(after.GetState()) &&
		(before == nil || before.GetKeySlot() != after.GetKeySlot()) {
		ns := after.GetNamespace()
		cmps = append(cmps,
			clientv3.Compare(clientv3.CreateRevision(k.taskSlot(ns, id, after.GetKeySlot())), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(k.taskSlot(ns, id, max(limit, after.GetKeySlot())+1)), "=", 0).
				WithRange(prefixEnd(k.taskSlotsOf(ns, id))))
	}
	for _, s := range after.GetSteps() {
		if HoldsKeySlot(s) {
			cmps = append(cmps, k.keySlotCmps(before, after, s)...)
		}
		if !HoldsSlot(s) {
			continue
		}
		typ := taskstate.ExecutionType(after, s)
		if b := taskstate.FindStep(before, s.GetName()); b != nil && HoldsSlot(b) && b.GetSlot() == s.GetSlot() &&
			b.GetAttempt() == s.GetAttempt() && taskstate.ExecutionType(before, b) == typ {
			continue // held already
		}
		ns := after.GetNamespace()
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k.slot(ns, typ, s.GetSlot())), "=", 0))
		if s.GetSlotLimit() > 0 {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k.slot(ns, typ, max(s.GetSlotLimit(), s.GetSlot())+1)), "=", 0).
				WithRange(prefixEnd(k.slotsOf(ns, typ))))
		}
		// slot_limit 0: a running attempt adopted into a slot when its
		// type got a first limit (scheduler/flowadopt.go), above the limit
		// if need be: only the slot itself must be free.
	}
	return cmps
}

// keySlotCmps is slotCmps for the slot of s's concurrency key.
func (k keys) keySlotCmps(before, after *reevev1.Task, s *reevev1.Step) []clientv3.Cmp {
	id, limit := KeyID(after, s)
	if id == "" {
		return nil
	}
	if b := taskstate.FindStep(before, s.GetName()); b != nil && HoldsKeySlot(b) && b.GetKeySlot() == s.GetKeySlot() && b.GetAttempt() == s.GetAttempt() {
		return nil // held already
	}
	ns := after.GetNamespace()
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(k.keySlot(ns, id, s.GetKeySlot())), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(k.keySlot(ns, id, max(limit, s.GetKeySlot())+1)), "=", 0).
			WithRange(prefixEnd(k.keySlotsOf(ns, id))),
	}
}

// GetQueueConfig returns a step type's flow-control settings; an empty
// config when none are set.
func (s *Store) GetQueueConfig(ctx context.Context, ns, typ string) (*reevev1.QueueConfig, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, s.k.queue(ns, typ))
	if err != nil {
		return nil, etcdErr(ctx, "get queue", err)
	}
	if len(resp.Kvs) == 0 {
		return &reevev1.QueueConfig{}, nil
	}
	return unmarshalQueueConfig(resp.Kvs[0].Value)
}

// UpdateQueueConfig applies fn to a step type's settings (an empty config
// when none are set) and writes the result, compared on the key's
// revision and retried on conflict. A config fn leaves empty is deleted.
func (s *Store) UpdateQueueConfig(ctx context.Context, ns, typ string, fn func(*reevev1.QueueConfig) error) (*reevev1.QueueConfig, error) {
	key := s.k.queue(ns, typ)
	for range maxUpdateRetries {
		octx, cancel := s.opCtx(ctx)
		resp, err := s.c.Get(octx, key)
		cancel()
		if err != nil {
			return nil, etcdErr(ctx, "get queue", err)
		}
		cfg, rev := &reevev1.QueueConfig{}, int64(0)
		if len(resp.Kvs) > 0 {
			if cfg, err = unmarshalQueueConfig(resp.Kvs[0].Value); err != nil {
				return nil, err
			}
			rev = resp.Kvs[0].ModRevision
		}
		if err := fn(cfg); err != nil {
			return nil, err
		}
		var op clientv3.Op
		if cfg.GetMaxRunning() == 0 && cfg.GetRate() == 0 && !cfg.GetPaused() {
			op = clientv3.OpDelete(key)
		} else {
			val, err := marshal(cfg)
			if err != nil {
				return nil, err
			}
			op = clientv3.OpPut(key, val)
		}
		octx, cancel = s.opCtx(ctx)
		tr, err := s.c.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(op).Commit()
		cancel()
		if err != nil {
			return nil, etcdErr(ctx, "write queue", err)
		}
		if tr.Succeeded {
			return cfg, nil
		}
	}
	return nil, fmt.Errorf("write queue %s/%s: %w", ns, typ, ErrConflict)
}

// QueueConfigs returns the settings of every step type of namespace ns
// that has some, by type.
func (s *Store) QueueConfigs(ctx context.Context, ns string) (map[string]*reevev1.QueueConfig, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	p := s.k.queue(ns, "")
	resp, err := s.c.Get(octx, p, clientv3.WithPrefix())
	if err != nil {
		return nil, etcdErr(ctx, "list queues", err)
	}
	out := map[string]*reevev1.QueueConfig{}
	for _, kv := range resp.Kvs {
		cfg, err := unmarshalQueueConfig(kv.Value)
		if err != nil {
			return nil, err
		}
		out[strings.TrimPrefix(string(kv.Key), p)] = cfg
	}
	return out, nil
}

// HeldSlots returns the slots held in namespace ns, by type, with the
// attempt ("<task-id>/<step>/<attempt>") holding each.
func (s *Store) HeldSlots(ctx context.Context, ns string) (map[string]map[int32]string, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	p := s.k.slotsPrefix() + ns + "/"
	resp, err := s.c.Get(octx, p, clientv3.WithPrefix())
	if err != nil {
		return nil, etcdErr(ctx, "list slots", err)
	}
	out := map[string]map[int32]string{}
	for _, kv := range resp.Kvs {
		typ, slot, ok := parseSlot(strings.TrimPrefix(string(kv.Key), p))
		if !ok {
			continue
		}
		if out[typ] == nil {
			out[typ] = map[int32]string{}
		}
		out[typ][slot] = string(kv.Value)
	}
	return out, nil
}

func unmarshalQueueConfig(b []byte) (*reevev1.QueueConfig, error) {
	cfg := &reevev1.QueueConfig{}
	if err := proto.Unmarshal(b, cfg); err != nil {
		return nil, fmt.Errorf("store: decode queue config: %w", err)
	}
	return cfg, nil
}

// parseSlot splits "<type>/<slot>".
func parseSlot(rest string) (typ string, slot int32, ok bool) {
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.ParseInt(rest[i+1:], 10, 32)
	if err != nil {
		return "", 0, false
	}
	return rest[:i], int32(n), true
}

// FlowEvent is a change of the flow-control state every scheduler follows:
// a step type's settings, a slot taken or freed, a scheduler come or gone.
type FlowEvent struct {
	// Reset means the watch of Kind restarted: forget everything of that
	// kind; the events that follow are all of it again, then Synced.
	Reset bool
	// Synced means every key of Kind has been sent since the last Reset.
	Synced bool
	Kind   FlowKind
	// Namespace and Type name the step type (KindQueue, KindSlot).
	Namespace, Type string
	// Key is a concurrency key's id, KeyID's (FlowKeySlot) or TaskKeyID's
	// (FlowTaskSlot, FlowKeyWait).
	Key string
	// TaskID and Created name a task waiting for a slot of Key
	// (FlowKeyWait): its id and create time (unix ns).
	TaskID  string
	Created int64
	// Limit is the key's max_running (FlowKeyWait).
	Limit int32
	// Slot is the slot (FlowSlot, FlowKeySlot); Scheduler the scheduler id
	// (FlowScheduler).
	Slot      int32
	Scheduler string
	// Config is the type's settings (KindQueue); nil when deleted.
	Config *reevev1.QueueConfig
	// Deleted: the key is gone.
	Deleted bool
}

// FlowKind says what a FlowEvent is about.
type FlowKind int

const (
	FlowQueue FlowKind = iota
	FlowSlot
	FlowScheduler
	FlowKeySlot
	FlowTaskSlot
	FlowKeyWait
	// NumFlowKinds is the number of kinds.
	NumFlowKinds
)

// WatchFlow sends the step types' settings, the held slots and the live
// schedulers, then every change of them, until ctx ends; after any
// interruption a kind starts over with a Reset event. It returns ctx's
// error.
func (s *Store) WatchFlow(ctx context.Context, events chan<- FlowEvent) error {
	kinds := []struct {
		kind   FlowKind
		prefix string
	}{{FlowQueue, s.k.queuesPrefix()}, {FlowSlot, s.k.slotsPrefix()}, {FlowScheduler, s.k.schedulersPrefix()}, {FlowKeySlot, s.k.keySlotsPrefix()},
		{FlowTaskSlot, s.k.taskSlotsPrefix()}, {FlowKeyWait, s.k.keyWaitPrefix()}}
	done := make(chan struct{}, len(kinds))
	for _, k := range kinds {
		go func() {
			defer func() { done <- struct{}{} }()
			_ = listAndFollow(ctx,
				func() (int64, error) { return s.listFlow(ctx, k.kind, k.prefix, events) },
				func(rev int64) error { return s.followFlow(ctx, k.kind, k.prefix, rev, events) })
		}()
	}
	for range kinds {
		<-done
	}
	return ctx.Err()
}

func (s *Store) listFlow(ctx context.Context, kind FlowKind, prefix string, events chan<- FlowEvent) (int64, error) {
	octx, cancel := s.opCtx(ctx)
	resp, err := s.c.Get(octx, prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return 0, etcdErr(ctx, "list flow control", err)
	}
	if !send(ctx, events, FlowEvent{Reset: true, Kind: kind}) {
		return 0, ctx.Err()
	}
	for _, kv := range resp.Kvs {
		if ev, ok := flowEvent(kind, prefix, kv, false); ok && !send(ctx, events, ev) {
			return 0, ctx.Err()
		}
	}
	if !send(ctx, events, FlowEvent{Synced: true, Kind: kind}) {
		return 0, ctx.Err()
	}
	return resp.Header.Revision, nil
}

func (s *Store) followFlow(ctx context.Context, kind FlowKind, prefix string, rev int64, events chan<- FlowEvent) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range s.c.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, e := range wr.Events {
			if ev, ok := flowEvent(kind, prefix, e.Kv, e.Type == mvccpb.DELETE); ok && !send(ctx, events, ev) {
				return ctx.Err()
			}
		}
	}
	return ctx.Err()
}

func flowEvent(kind FlowKind, prefix string, kv *mvccpb.KeyValue, deleted bool) (FlowEvent, bool) {
	rest := strings.TrimPrefix(string(kv.Key), prefix)
	ev := FlowEvent{Kind: kind, Deleted: deleted}
	switch kind {
	case FlowScheduler:
		ev.Scheduler = rest
		return ev, true
	case FlowQueue:
		ns, typ, ok := strings.Cut(rest, "/")
		if !ok {
			return ev, false
		}
		ev.Namespace, ev.Type = ns, typ
		if !deleted {
			cfg, err := unmarshalQueueConfig(kv.Value)
			if err != nil {
				return ev, false
			}
			ev.Config = cfg
		}
		return ev, true
	case FlowKeyWait:
		// <ns>/<workflow>/<hash>/<created>/<task-id>
		parts := strings.Split(rest, "/")
		if len(parts) != 5 {
			return ev, false
		}
		created, err := strconv.ParseInt(parts[3], 10, 64)
		if err != nil {
			return ev, false
		}
		ev.Namespace, ev.Key, ev.Created, ev.TaskID = parts[0], parts[1]+"/"+parts[2], created, parts[4]
		if !deleted {
			n, err := strconv.ParseInt(string(kv.Value), 10, 32)
			if err != nil {
				return ev, false
			}
			ev.Limit = int32(n)
		}
		return ev, true
	case FlowKeySlot, FlowTaskSlot:
		ns, r, ok := strings.Cut(rest, "/")
		if !ok {
			return ev, false
		}
		id, slot, ok := parseSlot(r)
		if !ok {
			return ev, false
		}
		ev.Namespace, ev.Key, ev.Slot = ns, id, slot
		return ev, true
	default:
		ns, r, ok := strings.Cut(rest, "/")
		if !ok {
			return ev, false
		}
		typ, slot, ok := parseSlot(r)
		if !ok {
			return ev, false
		}
		ev.Namespace, ev.Type, ev.Slot = ns, typ, slot
		return ev, true
	}
}
