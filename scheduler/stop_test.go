package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
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

	var submitted atomic.Int64
	ids := make(chan string, tasks)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for submitted.Add(1) <= tasks {
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				resp, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: inline(step("a", "x"))})
				cancel()
				if err != nil {
					t.Errorf("submit: %v", err)
					return
				}
				ids <- resp.GetTask().GetId()
			}
		})
	}
	// Stop s1 while claims are in flight.
	deadline := time.Now().Add(wait)
	for submitted.Load() < tasks/3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	s1.Stop()
	wg.Wait()
	close(ids)
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
