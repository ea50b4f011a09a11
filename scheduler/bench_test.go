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

// BenchmarkDispatchAndResult is the scheduler's hot path end to end over
// real gRPC and a real embedded etcd (fsync off): submit a one-step task,
// claim and dispatch it to a connected agent, record the agent's result.
// 64 clients submit concurrently; one raw agent answers every assignment at
// once. It reports completed tasks/s; ns/op is per task.
func BenchmarkDispatchAndResult(b *testing.B) {
	env := testenv.New(b)
	s := env.StartScheduler("")
	c := s.Client(b)
	agent := testenv.ConnectRaw(b, s.Addr, register("bench", 2000, "t"))
	wf := inline(step("a", "t"))

	var accepted atomic.Int64
	allDone := make(chan struct{})
	stop := make(chan struct{})
	var loop sync.WaitGroup
	loop.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			m, ok := agent.Recv(100 * time.Millisecond)
			if !ok {
				continue
			}
			if as := m.GetAssignment(); as != nil {
				agent.TrySend(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_AssignmentAck{AssignmentAck: &reevev1.AssignmentAck{Ref: as.GetRef()}}})
				agent.TrySend(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{Ref: as.GetRef()}}})
			}
			if ack := m.GetResultAck(); ack != nil && ack.GetAccepted() {
				if accepted.Add(1) == int64(b.N) {
					close(allDone)
				}
			}
		}
	})
	defer func() { close(stop); loop.Wait() }()

	run := fmt.Sprintf("%x", time.Now().UnixNano())
	var next atomic.Int64
	start := time.Now()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("b-%s-%d", run, i), Workflow: wf})
				cancel()
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case <-allDone:
	case <-time.After(time.Minute):
		b.Fatalf("%d of %d results accepted within a minute", accepted.Load(), b.N)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tasks/s")
}
