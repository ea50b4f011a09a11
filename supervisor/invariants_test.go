package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/testenv"
)

// A randomized run: agents succeed, fail, go silent or fail permanently at
// random, and a scheduler crashes mid-run. At every sampled moment each
// dispatched step, and each queued step (every step has a schedule-to-start
// timeout), has exactly its deadline key, and no other deadline key exists;
// every task ends terminal, so no overdue step was left where it was, and
// no deadline key is left behind. How long a step stays overdue before the
// supervisor acts depends on the machine's load: it is logged, not asserted
// (`reeve bench --failover` measures it).
func TestRandomizedRunNeverStrandsAStep(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const (
		tasks   = 40
		timeout = 300 * time.Millisecond
	)
	env := testenv.New(t)
	s1, s2 := env.StartScheduler(""), env.StartScheduler("")
	env.StartSupervisor([]*testenv.Scheduler{s1, s2})

	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed))
	behave := func(ctx context.Context, st *agentsdk.Step) (any, error) {
		mu.Lock()
		p := rng.IntN(100)
		mu.Unlock()
		switch {
		case p < 12:
			<-ctx.Done() // silent: the complete-by passes
			return nil, ctx.Err()
		case p < 25:
			return nil, errors.New("transient")
		case p < 28:
			return nil, agentsdk.Permanent(errors.New("permanent"))
		}
		return map[string]int{"attempt": st.Attempt}, nil
	}
	runAgents(t, 3, []string{s1.Addr, s2.Addr}, behave)

	spec := func(name, typ string, deps ...string) *reevev1.StepSpec {
		return &reevev1.StepSpec{Name: name, Type: typ, DependsOn: deps, Timeout: durationpb.New(timeout),
			ScheduleToStartTimeout: durationpb.New(5 * time.Second), // long enough not to flood the supervisor after the scheduler crash
			RetryPolicy:            &reevev1.RetryPolicy{MaxAttempts: 4, InitialBackoff: durationpb.New(50 * time.Millisecond)},
			Compensation:           &reevev1.CompensationSpec{Type: "undo"},
			Escalation:             reevev1.Escalation_ESCALATION_COMPENSATE}
	}
	c := s2.Client(t)
	for i := range tasks {
		submit(t, c, fmt.Sprintf("r%02d", i), spec("a", "a"), spec("b", "b", "a"), spec("c", "c", "a"))
	}

	etcd := env.Etcd.Client()
	stop := make(chan struct{})
	violations := make(chan string, 100)
	var (
		sampler sync.WaitGroup
		worst   overdue // only the sampler writes it before Wait
	)
	sampler.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			vs, o := checkDeadlines(etcd)
			worst.max(o)
			for _, v := range vs {
				select {
				case violations <- v:
				default: // a full channel fails the test already; never block the sampler
				}
			}
		}
	})

	// Crash a scheduler mid-run: once some tasks finished, others are in flight.
	waitFor(t, "the first tasks to finish", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := etcd.Get(ctx, "/reeve/ended/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count >= 5
	})
	s1.Kill()

	// A bound against a hang only: the run takes a few seconds.
	deadline := time.Now().Add(3 * time.Minute)
	for i := range tasks {
		final := testenv.WaitTask(t, c, "default", fmt.Sprintf("r%02d", i), time.Until(deadline))
		if !taskstate.TerminalTask(final.GetState()) {
			t.Fatalf("seed %d: task r%02d ended the watch in %v", seed, i, final.GetState())
		}
	}
	close(stop)
	sampler.Wait()
	close(violations)
	for v := range violations {
		t.Errorf("seed %d: %s", seed, v)
	}
	// Every task is terminal: no step is due, and no deadline key is left.
	end, _ := checkDeadlines(etcd)
	for _, v := range end {
		t.Errorf("seed %d: at the end: %s", seed, v)
	}
	t.Logf("longest a step was seen past its deadline: %v (%s)", worst.by, worst.step)
}

// overdue is the step seen furthest past its deadline.
type overdue struct {
	by   time.Duration
	step string
}

// max keeps the larger of o and p.
func (o *overdue) max(p overdue) {
	if p.by > o.by {
		*o = p
	}
}

// runAgents runs n SDK agents (agent-0 …) on schedulers addrs, handling
// the step types "a", "b", "c" and "undo" with handle, until the test ends.
func runAgents(t *testing.T, n int, addrs []string, handle agentsdk.HandlerFunc) {
	for i := range n {
		a, err := agentsdk.New(addrs, agentsdk.WithLogger(testenv.Logger()), agentsdk.WithAgentID(fmt.Sprintf("agent-%d", i)),
			agentsdk.WithReconnectBackoff(10*time.Millisecond, 100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for _, typ := range []string{"a", "b", "c", "undo"} {
			a.Handle(typ, handle)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = a.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
	}
}

// checkDeadlines reads every task and the deadline index at one revision
// and reports dispatched or queued-with-a-deadline steps without their
// deadline key and stray deadline keys (what holds at every revision,
// however loaded the machine), and returns the step furthest past its
// deadline (how fast recovery is, which depends on the load).
func checkDeadlines(c *clientv3.Client) ([]string, overdue) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Txn(ctx).Then(
		clientv3.OpGet("/reeve/tasks/", clientv3.WithPrefix()),
		clientv3.OpGet("/reeve/deadlines/", clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return nil, overdue{} // etcd busy: skip this sample
	}
	keys := map[string]bool{}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		keys[string(kv.Key)] = true
	}
	var (
		out   []string
		worst overdue
	)
	now := time.Now()
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		rec := &storev1.TaskRecord{}
		if err := store.UnmarshalRecord(kv.Value, rec); err != nil {
			out = append(out, err.Error())
			continue
		}
		t := rec.GetTask()
		for _, s := range t.GetSteps() {
			by, due := taskstate.Deadline(s)
			if !due {
				continue
			}
			key := fmt.Sprintf("/reeve/deadlines/%020d/%s/%s/%s/%d", by.UnixNano(), t.GetNamespace(), t.GetId(), s.GetName(), s.GetAttempt())
			if !keys[key] {
				out = append(out, fmt.Sprintf("%s/%s attempt %d is %v without its deadline key", t.GetId(), s.GetName(), s.GetAttempt(), s.GetState()))
			}
			delete(keys, key)
			worst.max(overdue{by: now.Sub(by), step: fmt.Sprintf("%s/%s attempt %d, %v, queued %v", t.GetId(), s.GetName(), s.GetAttempt(), s.GetState(), taskstate.Queued(s))})
		}
	}
	for k := range keys {
		out = append(out, "deadline key without a dispatched or queued step: "+strings.TrimPrefix(k, "/reeve/deadlines/"))
	}
	return out, worst
}
