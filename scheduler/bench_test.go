package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// BenchmarkDispatchAndResult is the scheduler's hot path end to end over
// real gRPC and a real embedded etcd (fsync off): submit a one-step task,
// claim and dispatch it to a connected agent, record the agent's result.
// 64 clients submit concurrently; one raw agent answers every assignment at
// once. It reports completed tasks/s, and cpu-ns/op: the process's CPU
// (etcd, scheduler, clients and agent) per task, which other load on the
// machine moves less than ns/op.
func BenchmarkDispatchAndResult(b *testing.B) { dispatchAndResult(b, false) }

// BenchmarkDispatchAndResultByName is BenchmarkDispatchAndResult with the
// workflow registered and submitted by name (latest version), as reeve
// bench does: the lookup the workflow cache serves.
func BenchmarkDispatchAndResultByName(b *testing.B) { dispatchAndResult(b, true) }

func dispatchAndResult(b *testing.B, byName bool) {
	env := testenv.New(b)
	s := env.StartScheduler("")
	c := s.Client(b)
	agent := testenv.ConnectRaw(b, s.Addr, register("bench", 2000, "t"))
	newReq := func(id string) *reevev1.SubmitTaskRequest {
		return &reevev1.SubmitTaskRequest{TaskId: id, Workflow: inline(step("a", "t"))}
	}
	if byName {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		_, err := c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: &reevev1.Workflow{Name: "bench", Steps: []*reevev1.StepSpec{step("a", "t")}}})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		newReq = func(id string) *reevev1.SubmitTaskRequest {
			return &reevev1.SubmitTaskRequest{TaskId: id, Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "bench"}}}
		}
	}

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
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				_, err := c.SubmitTask(ctx, newReq(fmt.Sprintf("b-%s-%d", run, i)))
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
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tasks/s")
}

// processCPU is the process's user and system CPU time so far.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
