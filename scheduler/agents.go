package scheduler

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/workflow"
)

// loadInterval is how often a scheduler publishes its agents' in-flight
// counts (only the ones that changed) for ListAgents on other schedulers.
const loadInterval = 2 * time.Second

// agentLoad is one local agent stream's counters at one moment.
type agentLoad struct {
	ns, id   string
	inFlight int32
}

// publishLoads writes the in-flight count of every local agent stream
// whose count changed, every loadInterval, under the scheduler's lease,
// and removes those of streams that ended. It returns when ctx ends.
func (a *agents) publishLoads(ctx context.Context) {
	t := a.opts.clock.NewTicker(loadInterval)
	defer t.Stop()
	published := map[string]agentLoad{}
	var lease int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		cur := a.lease()
		if cur == 0 {
			continue
		}
		if int64(cur) != lease { // a new session: the old records went with the old lease
			lease, published = int64(cur), map[string]agentLoad{}
		}
		now := a.disp.loads()
		for session, l := range now {
			if old, ok := published[session]; ok && old == l {
				continue
			}
			if err := a.store.PutAgentLoad(ctx, l.ns, l.id, store.AgentLoad{SessionID: session, InFlight: l.inFlight}, cur); err != nil {
				a.log.Debug("publish agent load", "agent_id", l.id, "err", err)
				continue
			}
			published[session] = l
		}
		for session, l := range published {
			if _, ok := now[session]; ok {
				continue
			}
			if err := a.store.DeleteAgentLoad(ctx, l.ns, l.id, session); err != nil {
				a.log.Debug("remove agent load", "agent_id", l.id, "err", err)
				continue
			}
			delete(published, session)
		}
	}
}

// queueHead is one in-memory ready queue as ListAgents reports it.
type queueHead struct {
	typ          string
	depth        int
	taskID, step string
}

// ListAgents implements SchedulerService.
func (svc *schedulerService) ListAgents(ctx context.Context, req *reevev1.ListAgentsRequest) (*reevev1.ListAgentsResponse, error) {
	if err := workflow.ValidateNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, statusErr(err)
	}
	ns := workflow.Namespace(req.GetNamespace())
	size, after, err := page(pageAgents, ns, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, statusErr(err)
	}
	recs, more, err := svc.store.ListAgents(ctx, ns, after, size)
	if err != nil {
		return nil, statusErr(err)
	}
	local := svc.disp.loads()
	resp := &reevev1.ListAgentsResponse{}
	if more {
		resp.NextPageToken = encodePageToken(pageAgents, ns, recs[len(recs)-1].Record.GetAgentId())
	}
	queues := map[string]*reevev1.QueueInfo{}
	for _, a := range recs {
		r := a.Record
		info := &reevev1.AgentInfo{
			AgentId: r.GetAgentId(), Namespace: r.GetNamespace(), StepTypes: r.GetStepTypes(),
			MaxConcurrentSteps: r.GetMaxConcurrentSteps(), ConnectedSince: r.GetConnectTime(), SchedulerId: r.GetSchedulerId(),
		}
		if l, ok := local[r.GetSessionId()]; ok && r.GetSchedulerId() == svc.opts.id {
			info.InFlight = l.inFlight
		} else if a.LoadOK {
			info.InFlight = a.Load.InFlight
		}
		info.Credits = max(info.GetMaxConcurrentSteps()-info.GetInFlight(), 0)
		resp.Agents = append(resp.Agents, info)
		for _, typ := range r.GetStepTypes() {
			queues[typ] = &reevev1.QueueInfo{Namespace: ns, StepType: typ}
		}
	}
	if after == "" { // queues come with the first page
		resp.Queues = svc.queues(ctx, ns, queues)
	}
	slices.SortFunc(resp.Agents, func(a, b *reevev1.AgentInfo) int { return strings.Compare(a.GetAgentId(), b.GetAgentId()) })
	return resp, nil
}

// queues are the ready queues of namespace ns: those of this scheduler's
// memory, with an empty one for each other step type of served.
func (svc *schedulerService) queues(ctx context.Context, ns string, served map[string]*reevev1.QueueInfo) []*reevev1.QueueInfo {
	for _, h := range svc.disp.queueHeads(ns) {
		q := &reevev1.QueueInfo{Namespace: ns, StepType: h.typ, Depth: int64(h.depth)}
		if h.taskID != "" {
			q.OldestReadyTime = svc.readyTime(ctx, ns, h.taskID, h.step)
		}
		served[h.typ] = q
	}
	out := slices.Collect(maps.Values(served))
	slices.SortFunc(out, func(a, b *reevev1.QueueInfo) int { return strings.Compare(a.GetStepType(), b.GetStepType()) })
	return out
}

// readyTime returns when a queued step became ready (its not-before when
// later: a retry in backoff), or nil when it cannot be read.
func (svc *schedulerService) readyTime(ctx context.Context, ns, taskID, step string) *timestamppb.Timestamp {
	v, err := svc.store.GetTask(ctx, ns, taskID)
	if err != nil {
		return nil
	}
	for _, st := range v.Record.GetTask().GetSteps() {
		if st.GetName() != step {
			continue
		}
		rt := st.GetReadyTime()
		if nb := st.GetNotBefore(); nb != nil && (rt == nil || nb.AsTime().After(rt.AsTime())) {
			rt = nb
		}
		return rt
	}
	return nil
}
