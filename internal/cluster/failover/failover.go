// Package failover measures failover times on a local cluster of separate
// processes (internal/cluster): how long after a SIGKILL of the supervisor
// leader the first already-expired step is recovered by a standby, and how
// long after a SIGKILL of a scheduler its agents report results through
// another scheduler. `reeve bench --failover` runs it.
//
//	c, _ := cluster.Start(ctx, failover.ClusterConfig(dir, reeve, etcd, 5, 3))
//	m, _ := failover.New(c)
//	defer m.Close()
//	sup, _ := m.SupervisorRound(ctx, 1, 4)
//	sched, _ := m.SchedulerRound(ctx, 1, failover.SchedulerLoad{})
//
// Times come from the clocks of the processes, which share one machine:
// the kill is timed by this process, a recovery or a result by the
// timestamp of its history event, written by the scheduler that committed
// it.
package failover

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/chaos/workload"
	"github.com/reeve-org/reeve/internal/cluster"
	"github.com/reeve-org/reeve/internal/demo"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
)

// Keys of the default prefix (the cluster's) that the measurement watches:
// the supervisors' election and the agent records of every namespace.
var (
	electionPrefix = store.NewLayout(store.DefaultPrefix).ElectionCandidates()
	agentsPrefix   = store.NewLayout(store.DefaultPrefix).Agents("")
)

// ClusterConfig is the cluster a measurement needs: 3 etcd members (no
// fsync: safe against process kills), 2 schedulers, 2 supervisors with
// session TTL sessionTTL seconds, agent-1 serving the demo workflows (its
// demo.timeout step hangs on attempt 1) and chaosAgents agents serving the
// chaos workflow (steps that work for a given time). The workflows of both
// kinds (but chaos.wide, which needs a raised etcd limit) are registered by
// the launcher, so that the configuration runs secure as well (set Secure).
func ClusterConfig(dir, reeve, etcd string, sessionTTL, chaosAgents int) cluster.Config {
	var workflows []*reevev1.Workflow
	for _, w := range append(demo.Workflows(), workload.Workflows()...) {
		if w.GetName() != workload.WorkflowWide {
			workflows = append(workflows, w)
		}
	}
	return cluster.Config{Dir: dir, Reeve: reeve, Etcd: etcd, NoFsync: true, Workflows: workflows,
		Schedulers: 2, Supervisors: 2, SessionTTL: sessionTTL, Agents: 1 + chaosAgents,
		AgentArgs: func(i int) []string {
			if i == 0 {
				return []string{"--demo"}
			}
			return []string{"--chaos", "--side-effects", filepath.Join(dir, fmt.Sprintf("agent-%d-side-effects.jsonl", i+1))}
		}}
}

// Measurer runs failover rounds on a cluster started with ClusterConfig.
type Measurer struct {
	c       *cluster.Cluster
	cli     *clientv3.Client
	conns   []*grpc.ClientConn
	clients []reevev1.SchedulerServiceClient
	// dial are the options of a connection to a scheduler.
	dial []grpc.DialOption
	// agentOpts are the options of the agents a round runs in this
	// process: TLS with the Agent certificate in a secure cluster.
	agentOpts []agentsdk.Option
}

// New connects to the cluster's etcd and schedulers (in a secure cluster
// as cluster.Admin).
func New(c *cluster.Cluster) (*Measurer, error) {
	dial, err := c.DialOptions(cluster.Admin)
	if err != nil {
		return nil, err
	}
	agentTLS, err := c.ClientTLS(cluster.Agent)
	if err != nil {
		return nil, err
	}
	cli, err := c.Client()
	if err != nil {
		return nil, err
	}
	m := &Measurer{c: c, cli: cli, dial: dial}
	if agentTLS != nil {
		m.agentOpts = []agentsdk.Option{agentsdk.WithTLS(agentTLS)}
	}
	for _, addr := range c.SchedulerAddrs {
		cc, err := grpc.NewClient(addr, dial...)
		if err != nil {
			m.Close()
			return nil, err
		}
		m.conns = append(m.conns, cc)
		m.clients = append(m.clients, reevev1.NewSchedulerServiceClient(cc))
	}
	return m, nil
}

// Close closes the connections (not the cluster).
func (m *Measurer) Close() {
	for _, cc := range m.conns {
		_ = cc.Close()
	}
	_ = m.cli.Close()
}

// Etcd returns the measurer's etcd client, for checks.
func (m *Measurer) Etcd() *clientv3.Client { return m.cli }

// WaitReady waits until the workflows of both agent kinds are registered
// and every agent has a record (is connected to a scheduler).
func (m *Measurer) WaitReady(ctx context.Context) error {
	for _, name := range []string{"demo.timeout", "chaos.saga"} {
		if err := poll(ctx, "workflow "+name, func(ctx context.Context) (bool, error) {
			_, err := m.clients[0].GetWorkflow(ctx, &reevev1.GetWorkflowRequest{Name: name})
			return err == nil, nil
		}); err != nil {
			return err
		}
	}
	return poll(ctx, "agents connected", func(ctx context.Context) (bool, error) {
		p, _, err := m.placement(ctx)
		for _, a := range m.c.Agents {
			if _, ok := p[a.Name]; !ok {
				return false, err
			}
		}
		return err == nil, err
	})
}

// placement returns agent id → scheduler id from the agent records, and
// the revision read. The cluster's agents' ids are their process names.
func (m *Measurer) placement(ctx context.Context) (map[string]string, int64, error) {
	resp, err := m.cli.Get(ctx, agentsPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		var rec storev1.AgentRecord
		if err := proto.Unmarshal(kv.Value, &rec); err != nil {
			return nil, 0, fmt.Errorf("agent record %s: %w", kv.Key, err)
		}
		out[rec.GetAgentId()] = rec.GetSchedulerId()
	}
	return out, resp.Header.Revision, nil
}

// process returns the cluster process named name.
func (m *Measurer) process(group []*cluster.Process, name string) (*cluster.Process, int, error) {
	for i, p := range group {
		if p.Name == name {
			return p, i, nil
		}
	}
	return nil, 0, fmt.Errorf("failover: no process %s", name)
}

// getTask reads a task through any live scheduler.
func (m *Measurer) getTask(ctx context.Context, id string) (*reevev1.Task, error) {
	var errs []error
	for i, c := range m.clients {
		if !m.c.Schedulers[i].Running() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := c.GetTask(cctx, &reevev1.GetTaskRequest{TaskId: id})
		cancel()
		if err == nil {
			return resp.GetTask(), nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("get task %s: %w", id, errors.Join(errs...))
}

// poll calls check every 50 ms until it reports done, fails, or ctx ends.
func poll(ctx context.Context, what string, check func(context.Context) (bool, error)) error {
	var last error
	for {
		ok, err := check(ctx)
		if err != nil {
			last = err
		} else if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("failover: waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// watchTimes records when this process saw each event of a watch, until
// stop is called.
type watchTimes struct {
	mu     sync.Mutex
	events []seen
	stop   context.CancelFunc
	done   chan struct{}
}

type seen struct {
	at  time.Time
	ev  *clientv3.Event
	err error
}

func watchFrom(ctx context.Context, cli *clientv3.Client, key string, rev int64, opts ...clientv3.OpOption) *watchTimes {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	w := &watchTimes{stop: cancel, done: make(chan struct{})}
	ch := cli.Watch(wctx, key, append(opts, clientv3.WithRev(rev+1))...)
	go func() {
		defer close(w.done)
		for resp := range ch {
			now := time.Now()
			w.mu.Lock()
			if err := resp.Err(); err != nil {
				w.events = append(w.events, seen{at: now, err: err})
			}
			for _, ev := range resp.Events {
				w.events = append(w.events, seen{at: now, ev: ev})
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// close stops the watch and returns what it saw.
func (w *watchTimes) close() []seen {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.events
}

// until waits until done accepts the events seen so far, or bound passes
// or ctx ends, then stops the watch and returns what it saw.
func (w *watchTimes) until(ctx context.Context, done func([]seen) bool, bound time.Duration) []seen {
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		w.mu.Lock()
		ok := done(w.events)
		w.mu.Unlock()
		if ok {
			return w.close()
		}
		select {
		case <-ctx.Done():
			return w.close()
		case <-deadline.C:
			return w.close()
		case <-tick.C:
		}
	}
}

// percentile returns the p-th percentile (0–100) of xs, nearest rank.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// actorIs reports whether a history actor is kind/<id> for some id.
func actorIs(actor, kind string) (string, bool) {
	return strings.CutPrefix(actor, kind+"/")
}
