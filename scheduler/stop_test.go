package scheduler_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/testenv"
)

// A scheduler stopped gracefully while it dispatches a stream of steps must
// not leave any step RUNNING, locked to an agent that never got the
// assignment: every claim either reaches the agent or is taken back.
func TestGracefulStopStrandsNoClaim(t *testing.T) {
	const tasks = 600
	env, s1, _ := newEnv(t)
	s2 := env.StartScheduler("")
	c := s2.Client(t)
	agent := testenv.ConnectRaw(t, s1.Addr, register("a", 10000, "x"))

	// The agent reads (and acks) everything until its stream ends.
	got := map[string]bool{}
	var gotMu sync.Mutex
	var afterDrain atomic.Int64 // assignments that arrived behind the Drain
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		drained := false
		for {
			m, ok := agent.Recv(time.Minute)
			if !ok {
				return
			}
			drained = drained || m.GetDrain() != nil
			if as := m.GetAssignment(); as != nil {
				if drained {
					afterDrain.Add(1)
				}
				gotMu.Lock()
				got[key(as.GetRef())] = true
				gotMu.Unlock()
				agent.TrySend(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_AssignmentAck{AssignmentAck: &reevev1.AssignmentAck{Ref: as.GetRef()}}})
			}
		}
	}()

	// Stop s1 while claims are in flight: once a third of the tasks were
	// submitted and s1 has dispatched at least one (on a loaded machine its
	// watch of the ready queue can lag the submissions).
	ids := submitDuring(t, c, tasks, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "x"))}, func() {
		for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			gotMu.Lock()
			n := len(got)
			gotMu.Unlock()
			if n > 0 {
				break
			}
		}
		s1.Stop()
	})
	agent.Close()
	<-readerDone

	if len(got) == 0 {
		t.Fatal("s1 dispatched nothing before it stopped: the test proves nothing")
	}
	stranded := 0
	for id := range ids {
		task := getTask(t, c, id)
		st := stepOf(task, "a")
		if st.GetState() == reevev1.StepState_STEP_STATE_RUNNING && !got[key(&reevev1.StepRef{Namespace: "default", TaskId: id, Step: "a", Attempt: st.GetAttempt()})] {
			stranded++
			if stranded <= 3 {
				t.Errorf("task %s: step RUNNING at attempt %d, locked to %q, which never got it", id, st.GetAttempt(), st.GetLockedByAgent())
			}
		}
	}
	t.Logf("%d assignments delivered before the stop", len(got))
	if n := afterDrain.Load(); n > 0 {
		t.Errorf("%d assignments arrived after Drain: the agent has already left and will not run them", n)
	}
	if stranded > 0 {
		t.Fatalf("%d of %d steps stranded by a graceful stop", stranded, tasks)
	}
}

func key(r *reevev1.StepRef) string {
	return fmt.Sprintf("%s/%s/%s/%d", r.GetNamespace(), r.GetTaskId(), r.GetStep(), r.GetAttempt())
}

// The same with SDK agents (16 slots each) and a competing load on the
// machine: a claim committed while the scheduler stops (a result's write
// claiming the next task's step, a submission's direct claim) is delivered
// or taken back before the stop returns, so every task succeeds on the
// scheduler left, long before any complete-by. Before the stop's work
// waited for its take-backs, a busy machine left some of them RUNNING on
// the stopped scheduler's claims until their complete-by.
func TestGracefulStopUnderLoadStrandsNoClaim(t *testing.T) {
	const tasks = 600
	env, s1, c1 := newEnv(t)
	// s2 starts once the agents are on s1: they try s2's address first
	// or second, and only s1 answers at first.
	s2Addr := testenv.FreeAddr(t)

	// A competing load: one spinning goroutine per CPU until the stop is
	// over, so that the stop's goroutines wait for a CPU.
	spin, stopSpin := context.WithCancel(context.Background())
	var spinners sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		spinners.Go(func() {
			for spin.Err() == nil {
				for i := 0; i < 1e5; i++ {
					_ = i * i
				}
			}
		})
	}
	defer func() { stopSpin(); spinners.Wait() }()

	var onS1 atomic.Int64 // steps the agents ran while s1 served them
	s1Serving := atomic.Bool{}
	s1Serving.Store(true)
	for _, id := range []string{"a", "b"} {
		a, err := agentsdk.New([]string{s1.Addr, s2Addr}, agentsdk.WithAgentID(id), agentsdk.WithMaxConcurrentSteps(16), agentsdk.WithLogger(testenv.Logger()))
		if err != nil {
			t.Fatal(err)
		}
		a.Handle("x", func(context.Context, *agentsdk.Step) (any, error) {
			if s1Serving.Load() {
				onS1.Add(1)
			}
			return map[string]any{"ok": true}, nil
		})
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = a.Run(ctx) }()
		defer func() { stop(); <-done }()
	}
	waitAgents(t, c1, 2)
	s2 := env.StartScheduler(s2Addr)
	c := s2.Client(t)

	var began time.Time
	ids := submitDuring(t, c, tasks, &reevev1.SubmitTaskRequest{Workflow: inline(&reevev1.StepSpec{Name: "a", Type: "x", Timeout: durationpb.New(10 * time.Minute)})}, func() {
		// Not before s1 ran a step (its watch can lag on a busy machine).
		for deadline := time.Now().Add(wait); onS1.Load() == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		}
		began = time.Now()
		s1.Stop()
		s1Serving.Store(false)
		t.Logf("s1 stopped in %s", time.Since(began))
		stopSpin()
	})
	t.Logf("all submitted %s after the stop began", time.Since(began))
	if onS1.Load() == 0 {
		t.Fatal("the agents ran nothing from s1 before it stopped: the test proves nothing")
	}
	t.Logf("%d steps ran from s1 before its stop", onS1.Load())

	// A stranded step stays RUNNING for its 10 minutes: its task does not
	// end in time.
	stranded := 0
	deadline := time.Now().Add(time.Minute)
	for id := range ids {
		got := getTask(t, c, id)
		for !taskstate.TerminalTask(got.GetState()) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			got = getTask(t, c, id)
		}
		if got.GetState() == reevev1.TaskState_TASK_STATE_SUCCEEDED {
			continue
		}
		stranded++
		if stranded <= 3 {
			st := stepOf(got, "a")
			t.Errorf("task %s is %s: step %s at attempt %d, locked to %q by scheduler %q", id, got.GetState(), st.GetState(), st.GetAttempt(), st.GetLockedByAgent(), st.GetLockedByScheduler())
		}
	}
	t.Logf("all ended %s after the stop began", time.Since(began))
	if stranded > 0 {
		t.Fatalf("%d of %d tasks did not end after a graceful stop", stranded, tasks)
	}
}

// waitAgents waits until n agents are connected to the scheduler of c.
func waitAgents(t *testing.T, c reevev1.SchedulerServiceClient, n int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		resp, err := c.ListAgents(ctx, &reevev1.ListAgentsRequest{})
		cancel()
		if err == nil && len(resp.GetAgents()) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d agents connected after %s (err %v), want %d", len(resp.GetAgents()), wait, err, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// submitDuring submits n copies of req from 8 goroutines, calls stop once a
// third of them were sent (with the rest still flowing), and returns the
// ids of the tasks created, once every submission returned.
func submitDuring(t *testing.T, c reevev1.SchedulerServiceClient, n int, req *reevev1.SubmitTaskRequest, stop func()) <-chan string {
	t.Helper()
	var submitted atomic.Int64
	ids := make(chan string, n)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for submitted.Add(1) <= int64(n) {
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				resp, err := c.SubmitTask(ctx, req)
				cancel()
				if err != nil {
					t.Errorf("submit: %v", err)
					return
				}
				ids <- resp.GetTask().GetId()
			}
		})
	}
	deadline := time.Now().Add(wait)
	for submitted.Load() < int64(n/3) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	wg.Wait()
	close(ids)
	return ids
}
