package failover_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/cluster/clustertest"
	"github.com/reeve-org/reeve/internal/cluster/failover"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// A real cluster of separate processes (3 etcd members, 2 schedulers, 2
// supervisors with a 4 s session TTL, a demo agent and 3 chaos agents), in
// the production configuration: every link over mutual TLS, role checks on
// (cluster.Config.Secure), and no call of a component refused by them.
// The mechanisms of failover, not their timing (`reeve bench --failover`
// measures that):
//   - the supervisor leader is SIGKILLed while the first attempts of
//     demo.timeout tasks hang; they expire while no leader runs (before the
//     killed leader's lease is deleted); the standby wins and recovers them,
//     and they succeed on attempt 2;
//   - the scheduler most chaos agents are connected to is SIGKILLed while
//     their steps run and while an attempt it dispatched is held open by an
//     agent of the test; the agents register with the other scheduler, the
//     held attempt, released then, has its result accepted through the
//     other one on attempt 1, and every task succeeds;
//   - an agent running heartbeat steps is cut off for good when its
//     scheduler is SIGKILLed: the supervisor sees its record vanish with the
//     scheduler's lease, decides AGENT_LOST, and the steps run again on a
//     healthy agent long before their 1-minute complete-by.
func TestFailoverMechanisms(t *testing.T) {
	reeve, etcd := clustertest.Reeve(t), clustertest.Tool(t, "etcd")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfg := failover.ClusterConfig(dir, reeve, etcd, 4, 3)
	cfg.Secure = true
	c := clustertest.Start(ctx, t, cfg)
	clustertest.RequireSecure(ctx, t, c)
	m, err := failover.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}

	t.Run("supervisor leader killed", func(t *testing.T) {
		r, err := m.SupervisorRound(ctx, 1, 4)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", r)
		if r.NewLeader == "" || r.NewLeader == r.Killed {
			t.Errorf("recovered by %q, want the standby (killed %s)", r.NewLeader, r.Killed)
		}
		if !r.ExpiredBeforeTakeover {
			t.Errorf("a step's complete-by had not passed when the killed leader's lease was deleted (%.0f ms after the kill): the round does not show an already-expired step recovered", r.LeaseGoneMs)
		}
	})
	t.Run("scheduler killed", func(t *testing.T) {
		r, err := m.SchedulerRound(ctx, 1, failover.SchedulerLoad{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", r)
		if r.AgentsMoved == 0 {
			t.Errorf("no chaos agent was connected to the killed %s", r.Killed)
		}
		if !r.HeldAccepted {
			t.Errorf("the attempt dispatched by the killed %s and held across the kill was not accepted through the other scheduler on attempt 1: %s", r.Killed, r.HeldWhy)
		}
	})
	t.Run("agent and its scheduler lost together", func(t *testing.T) {
		r, err := m.LostAgentRound(ctx, 1, 3)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", r)
		if r.AgentLostMs <= 0 {
			t.Errorf("no AGENT_LOST decision by the supervisor: the heartbeat steps waited for something else (re-dispatched %.0f ms after the kill)", r.RedispatchMs)
		}
	})
	clustertest.Verify(ctx, t, m.Etcd())
	clustertest.NoRefusedCalls(t, c)
}
