package supervisor_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/supervisor"
)

// Deadline keys that no record implies (their task was deleted or ended, or
// an older attempt's key) sit at the front of the index, earlier than any
// real deadline. The leader removes them and recovers the real expired step
// behind them; before, it re-read the same unactionable front entries every
// tick and never got past them.
func TestOrphanDeadlineKeysDoNotHideExpiredSteps(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	cli := env.Etcd.Client()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	// A finished task, and a deadline key of its attempt left behind.
	agent := testenv.ConnectRaw(t, s.Addr, register("a", "work"))
	submit(t, c, "done", step("x", "work", 10*time.Second))
	agent.Succeed(agent.NextAssignment(wait).GetRef(), nil)
	testenv.WaitTask(t, c, "default", "done", wait)
	var orphans []string
	orphans = append(orphans, fmt.Sprintf("/reeve/deadlines/%020d/default/done/x/1", 1))
	// Keys of tasks that do not exist (deleted by retention, say).
	for i := range 300 {
		orphans = append(orphans, fmt.Sprintf("/reeve/deadlines/%020d/default/gone-%03d/x/1", 2+i, i))
	}
	for _, k := range orphans {
		if _, err := cli.Put(ctx, k, ""); err != nil {
			t.Fatal(err)
		}
	}

	// Pages of 10: the orphans fill the first 30 pages of the index.
	env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithBatch(10))
	submit(t, c, "real", step("x", "work", 300*time.Millisecond))
	first := agent.NextAssignment(wait) // never answered
	second := agent.NextAssignment(15 * time.Second)
	if second.GetRef().GetTaskId() != "real" || second.GetRef().GetAttempt() != 2 {
		t.Fatalf("after %v expired, got %v; want attempt 2 of real", first.GetRef(), second.GetRef())
	}
	for deadline := time.Now().Add(wait); ; {
		resp, err := cli.Get(ctx, "/reeve/deadlines/00000000000000000", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d orphan deadline keys left", resp.Count)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// With the safety-net tick far away, a single expiry is still acted on at
// once: the leader wakes at the head of the deadline index.
func TestSingleExpiryIsRecoveredWithoutWaitingForTheTick(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	c := s.Client(t)
	sup := env.StartSupervisor([]*testenv.Scheduler{s}, supervisor.WithTick(time.Minute))
	agent := testenv.ConnectRaw(t, s.Addr, register("a", "work"))
	// The leader settles on an empty index first: it must learn of the new
	// deadline from its watch.
	waitLeading(t, sup)
	submit(t, c, "one", step("x", "work", 500*time.Millisecond))
	first := agent.NextAssignment(wait)
	second := agent.NextAssignment(wait)
	redispatched := second.GetCompleteBy().AsTime().Add(-500 * time.Millisecond)
	// Generous for a loaded machine; the tick would take a minute.
	if late := redispatched.Sub(first.GetCompleteBy().AsTime()); late > 3*time.Second {
		t.Fatalf("re-dispatched %v after complete-by, want well under the 1m tick", late)
	}
}
