package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
)

// PutAgent records a connected agent under lease (the scheduler's session
// lease), so the record disappears with the scheduler. It returns the
// record's revision, for DeleteAgent.
func (s *Store) PutAgent(ctx context.Context, rec *storev1.AgentRecord, lease clientv3.LeaseID) (int64, error) {
	val, err := marshal(rec)
	if err != nil {
		return 0, err
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Put(octx, s.k.agent(rec.GetNamespace(), rec.GetAgentId()), val, clientv3.WithLease(lease))
	if err != nil {
		return 0, etcdErr(ctx, "put agent", err)
	}
	return resp.Header.Revision, nil
}

// DeleteAgent removes an agent record unless a newer connection of the same
// agent replaced it since revision rev.
func (s *Store) DeleteAgent(ctx context.Context, ns, id string, rev int64) error {
	key := s.k.agent(ns, id)
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	_, err := s.c.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
	return etcdErr(ctx, "delete agent", err)
}

// AgentLoad is what a scheduler last published about one agent stream's
// work (see PutAgentLoad).
type AgentLoad struct {
	SessionID string
	InFlight  int32
}

// PutAgentLoad records how many steps an agent stream runs, under lease
// (the scheduler's session lease) like the agent record, for ListAgents on
// other schedulers.
func (s *Store) PutAgentLoad(ctx context.Context, ns, id string, load AgentLoad, lease clientv3.LeaseID) error {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	_, err := s.c.Put(octx, s.k.agentLoad(ns, id), fmt.Sprintf("%s %d", load.SessionID, load.InFlight), clientv3.WithLease(lease))
	return etcdErr(ctx, "put agent load", err)
}

// DeleteAgentLoad removes an agent's load record if it is still the one of
// session sessionID.
func (s *Store) DeleteAgentLoad(ctx context.Context, ns, id, sessionID string) error {
	key := s.k.agentLoad(ns, id)
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return etcdErr(ctx, "delete agent load", err)
	}
	if l, ok := parseAgentLoad(string(resp.Kvs[0].Value)); !ok || l.SessionID != sessionID {
		return nil
	}
	_, err = s.c.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).Then(clientv3.OpDelete(key)).Commit()
	return etcdErr(ctx, "delete agent load", err)
}

func parseAgentLoad(v string) (AgentLoad, bool) {
	session, n, ok := strings.Cut(v, " ")
	if !ok {
		return AgentLoad{}, false
	}
	in, err := strconv.ParseInt(n, 10, 32)
	if err != nil {
		return AgentLoad{}, false
	}
	return AgentLoad{SessionID: session, InFlight: int32(in)}, true
}

// ConnectedAgent is one agent record with its load, when published.
type ConnectedAgent struct {
	Record *storev1.AgentRecord
	// Load is the agent stream's last published load; ok false when none
	// was published for this stream yet.
	Load   AgentLoad
	LoadOK bool
}

// ListAgents returns a page of the agents connected to any scheduler in
// namespace ns, by id: at most limit of them after the id after ("" for the
// first page), with their published loads read at the same revision, and
// whether more follow.
func (s *Store) ListAgents(ctx context.Context, ns, after string, limit int) (agents []ConnectedAgent, more bool, err error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	ap, lp := s.k.agent(ns, ""), s.k.agentLoad(ns, "")
	start := ap
	if after != "" {
		start = ap + after + "\x00"
	}
	resp, err := s.c.Get(octx, start, clientv3.WithRange(prefixEnd(ap)), clientv3.WithLimit(int64(limit)+1))
	if err != nil {
		return nil, false, etcdErr(ctx, "list agents", err)
	}
	kvs := resp.Kvs
	if len(kvs) > limit {
		kvs, more = kvs[:limit], true
	}
	if len(kvs) == 0 {
		return nil, false, nil
	}
	first, last := strings.TrimPrefix(string(kvs[0].Key), ap), strings.TrimPrefix(string(kvs[len(kvs)-1].Key), ap)
	lresp, err := s.c.Get(octx, lp+first, clientv3.WithRange(lp+last+"\x00"), clientv3.WithRev(resp.Header.Revision))
	if err != nil {
		return nil, false, etcdErr(ctx, "list agents", err)
	}
	loads := map[string]AgentLoad{}
	for _, kv := range lresp.Kvs {
		if l, ok := parseAgentLoad(string(kv.Value)); ok {
			loads[strings.TrimPrefix(string(kv.Key), lp)] = l
		}
	}
	for _, kv := range kvs {
		rec := &storev1.AgentRecord{}
		if err := proto.Unmarshal(kv.Value, rec); err != nil {
			return nil, false, fmt.Errorf("store: decode %s: %w", kv.Key, err)
		}
		a := ConnectedAgent{Record: rec}
		if l, ok := loads[rec.GetAgentId()]; ok && l.SessionID == rec.GetSessionId() {
			a.Load, a.LoadOK = l, true
		}
		agents = append(agents, a)
	}
	return agents, more, nil
}

// DeleteAgentSession removes an agent record if it is still the one of
// stream sessionID (a newer connection of the same agent keeps its record),
// however often the record was written. A record of a version this Reeve
// does not know is left (ErrUnknownVersion): it goes with the lease of the
// scheduler that wrote it.
func (s *Store) DeleteAgentSession(ctx context.Context, ns, id, sessionID string) error {
	key := s.k.agent(ns, id)
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return etcdErr(ctx, "delete agent", err)
	}
	rec := &storev1.AgentRecord{}
	if err := proto.Unmarshal(resp.Kvs[0].Value, rec); err != nil {
		return fmt.Errorf("store: decode %s: %w", key, err)
	}
	if v := rec.GetRecordVersion(); !knownVersion(v) {
		// Whose session it is, is a newer Reeve's to say; the record
		// goes with its scheduler's lease.
		return s.unknownVersion("delete agent", &UnknownVersionError{Kind: KindAgent, Namespace: ns, Name: id, Key: key, Version: v})
	}
	if rec.GetSessionId() != sessionID {
		return nil
	}
	_, err = s.c.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).Then(clientv3.OpDelete(key)).Commit()
	return etcdErr(ctx, "delete agent", err)
}

// PutDisconnected records, under lease (the scheduler's session lease), that
// the stream of rec's agent (rec.connect_time: when the stream ended) ended
// while the scheduler still holds the
// heartbeat deadlines of its executions in memory. Written before the agent
// record is deleted, so that one of the two keys exists until the deadlines
// are resolved: if the scheduler dies meanwhile, the key vanishes with its
// lease and WatchLostAgents reports the agent.
func (s *Store) PutDisconnected(ctx context.Context, rec *storev1.AgentRecord, lease clientv3.LeaseID) error {
	val, err := marshal(rec)
	if err != nil {
		return err
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	_, err = s.c.Put(octx, s.k.disconnected(rec.GetNamespace(), rec.GetAgentId(), rec.GetSessionId()), val, clientv3.WithLease(lease))
	return etcdErr(ctx, "put disconnected agent", err)
}

// DeleteDisconnected removes the key PutDisconnected wrote, once the
// scheduler resolved every deadline it held for that stream.
func (s *Store) DeleteDisconnected(ctx context.Context, ns, id, sessionID string) error {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	_, err := s.c.Delete(octx, s.k.disconnected(ns, id, sessionID))
	return etcdErr(ctx, "delete disconnected agent", err)
}
