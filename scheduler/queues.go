package scheduler

import (
	"context"
	"log/slog"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

var _ reevev1.QueueServiceServer = (*queueService)(nil)

// maxQueueLimit bounds max_running, rate and burst.
const maxQueueLimit = 1_000_000

// queueService implements reeve.v1.QueueService: thin handlers over the
// store's queue settings (internal/store/queues.go), which every
// scheduler's dispatcher follows (limits.go). Its writes are an admin's,
// not fenced: each compares the key's revision and retries.
type queueService struct {
	reevev1.UnimplementedQueueServiceServer
	opts  *options
	log   *slog.Logger
	store *store.Store
	disp  *dispatcher
}

// SetQueueLimit implements QueueService.
func (svc *queueService) SetQueueLimit(ctx context.Context, req *reevev1.SetQueueLimitRequest) (*reevev1.SetQueueLimitResponse, error) {
	if err := validateQueueRef(req); err != nil {
		return nil, statusErr(err)
	}
	switch {
	case req.GetClear() && (req.GetMaxRunning() != 0 || req.GetRate() != 0 || req.GetBurst() != 0):
		return nil, statusErr(&workflow.FieldError{Field: "clear", Reason: "clear removes every limit: max_running, rate and burst must be 0 with it"})
	case req.GetMaxRunning() < 0 || req.GetMaxRunning() > maxQueueLimit:
		return nil, statusErr(&workflow.FieldError{Field: "max_running", Reason: "must be 0 (no limit) to 1000000"})
	case math.IsNaN(req.GetRate()) || req.GetRate() < 0 || req.GetRate() > maxQueueLimit:
		return nil, statusErr(&workflow.FieldError{Field: "rate", Reason: "must be 0 (no limit) to 1000000 attempts per second"})
	case req.GetBurst() < 0 || req.GetBurst() > maxQueueLimit:
		return nil, statusErr(&workflow.FieldError{Field: "burst", Reason: "must be 0 to 1000000"})
	case req.GetBurst() != 0 && req.GetRate() == 0:
		return nil, statusErr(&workflow.FieldError{Field: "burst", Reason: "only with a rate"})
	case !req.GetClear() && req.GetMaxRunning() == 0 && req.GetRate() == 0:
		return nil, statusErr(&workflow.FieldError{Field: "max_running", Reason: "set max_running or rate, or clear"})
	}
	ns := workflow.Namespace(req.GetNamespace())
	now := svc.opts.clock.Now()
	cfg, err := svc.store.UpdateQueueConfig(ctx, ns, req.GetType(), func(c *reevev1.QueueConfig) error {
		c.MaxRunning, c.Rate, c.Burst = req.GetMaxRunning(), req.GetRate(), req.GetBurst()
		if c.Rate > 0 && c.Burst == 0 {
			c.Burst = 1
		}
		c.UpdateTime = timestamppb.New(now)
		return nil
	})
	if err != nil {
		return nil, statusErr(err)
	}
	svc.log.InfoContext(ctx, "queue limits set", "namespace", ns, "type", req.GetType(),
		"max_running", cfg.GetMaxRunning(), "rate", cfg.GetRate(), "burst", cfg.GetBurst())
	return &reevev1.SetQueueLimitResponse{Config: cfg}, nil
}

// PauseQueue implements QueueService.
func (svc *queueService) PauseQueue(ctx context.Context, req *reevev1.PauseQueueRequest) (*reevev1.PauseQueueResponse, error) {
	cfg, err := svc.setPaused(ctx, req, true)
	if err != nil {
		return nil, err
	}
	return &reevev1.PauseQueueResponse{Config: cfg}, nil
}

// ResumeQueue implements QueueService.
func (svc *queueService) ResumeQueue(ctx context.Context, req *reevev1.ResumeQueueRequest) (*reevev1.ResumeQueueResponse, error) {
	cfg, err := svc.setPaused(ctx, req, false)
	if err != nil {
		return nil, err
	}
	return &reevev1.ResumeQueueResponse{Config: cfg}, nil
}

type queueRef interface {
	GetNamespace() string
	GetType() string
}

func validateQueueRef(req queueRef) error {
	if err := workflow.ValidateNamespace("namespace", req.GetNamespace()); err != nil {
		return err
	}
	return workflow.ValidateName("type", req.GetType())
}

func (svc *queueService) setPaused(ctx context.Context, req queueRef, paused bool) (*reevev1.QueueConfig, error) {
	if err := validateQueueRef(req); err != nil {
		return nil, statusErr(err)
	}
	ns := workflow.Namespace(req.GetNamespace())
	now := svc.opts.clock.Now()
	cfg, err := svc.store.UpdateQueueConfig(ctx, ns, req.GetType(), func(c *reevev1.QueueConfig) error {
		if c.GetPaused() != paused {
			c.Paused, c.UpdateTime = paused, timestamppb.New(now)
		}
		return nil
	})
	if err != nil {
		return nil, statusErr(err)
	}
	svc.log.InfoContext(ctx, "queue pause changed", "namespace", ns, "type", req.GetType(), "paused", paused)
	return cfg, nil
}

// maxListedAgents bounds the agents ListQueues reads to find their types.
const maxListedAgents = 10_000

// ListQueues implements QueueService.
func (svc *queueService) ListQueues(ctx context.Context, req *reevev1.ListQueuesRequest) (*reevev1.ListQueuesResponse, error) {
	if err := workflow.ValidateNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, statusErr(err)
	}
	ns := workflow.Namespace(req.GetNamespace())
	configs, err := svc.store.QueueConfigs(ctx, ns)
	if err != nil {
		return nil, statusErr(err)
	}
	byType := map[string]*reevev1.Queue{}
	get := func(typ string) *reevev1.Queue {
		q := byType[typ]
		if q == nil {
			q = &reevev1.Queue{Namespace: ns, Type: typ}
			byType[typ] = q
		}
		return q
	}
	for typ, cfg := range configs {
		get(typ).Config = cfg
	}
	// Agents of every scheduler, by their registered types.
	for after, n := "", 0; n < maxListedAgents; {
		page, more, err := svc.store.ListAgents(ctx, ns, after, 1000)
		if err != nil {
			return nil, statusErr(err)
		}
		for _, a := range page {
			for _, typ := range a.Record.GetStepTypes() {
				get(typ).Agents++
			}
			after = a.Record.GetAgentId()
		}
		n += len(page)
		if !more {
			break
		}
	}
	svc.disp.flowStats(ns, get)
	out := &reevev1.ListQueuesResponse{}
	for _, typ := range slices.Sorted(func(yield func(string) bool) {
		for t := range byType {
			if !yield(t) {
				return
			}
		}
	}) {
		out.Queues = append(out.Queues, byType[typ])
	}
	return out, nil
}

// flowStats fills, for namespace ns, what this scheduler's dispatcher
// knows of each type: the steps queued (every scheduler sees the whole
// ready queue) and the oldest one's wait (queueStats), and the slots held.
func (d *dispatcher) flowStats(ns string, get func(typ string) *reevev1.Queue) {
	for k, st := range d.queueStats() {
		if k.ns != ns || st.n == 0 {
			continue
		}
		q := get(k.typ)
		q.Queued, q.OldestWait = int64(st.n), durationpb.New(st.oldest)
	}
	d.lock()
	defer d.unlock()
	for k, cfg := range d.flow.configs {
		if k.ns != ns || cfg.GetMaxRunning() == 0 {
			continue
		}
		q := get(k.typ)
		q.Running, q.RunningCounted = int64(len(d.flow.held[k])), true
		if q.Config == nil {
			q.Config = proto.Clone(cfg).(*reevev1.QueueConfig)
		}
	}
}

// waitReason says why a queued step of type typ in namespace ns is not
// dispatched, "" when flow control does not hold it back.
func (d *dispatcher) waitReason(ns, typ string) string {
	d.lock()
	defer d.unlock()
	return d.flow.waitReason(queueKey{ns, typ}, d.clock.Now())
}

// withWaitReasons returns t with Step.wait_reason set on each queued step
// that flow control holds back (a copy when any is), else t itself.
func (d *dispatcher) withWaitReasons(t *reevev1.Task) *reevev1.Task {
	var out *reevev1.Task
	for i, st := range t.GetSteps() {
		if !taskstate.Dispatchable(t, st) {
			continue
		}
		why := d.waitReason(t.GetNamespace(), taskstate.ExecutionType(t, st))
		if why == "" {
			continue
		}
		if out == nil {
			out = proto.Clone(t).(*reevev1.Task)
		}
		out.GetSteps()[i].WaitReason = why
	}
	if out == nil {
		return t
	}
	return out
}
