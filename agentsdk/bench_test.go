package agentsdk_test

import (
	"context"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// driver is a minimal scheduler side of the protocol: it sends n
// assignments, at most window outstanding, and acks every result.
type driver struct {
	reevev1.UnimplementedAgentServiceServer
	n, window int
	done      chan struct{}
}

func (d *driver) Connect(stream reevev1.AgentService_ConnectServer) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	if err := stream.Send(&reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_Registered{Registered: &reevev1.Registered{SessionId: "s"}}}); err != nil {
		return err
	}
	by := timestamppb.New(time.Now().Add(time.Hour))
	sent, finished := 0, 0
	send := func() error {
		ref := &reevev1.StepRef{Namespace: "default", TaskId: "t", Step: "s", Attempt: int32(sent + 1)}
		sent++
		return stream.Send(&reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_Assignment{Assignment: &reevev1.StepAssignment{Ref: ref, Type: "noop", CompleteBy: by}}})
	}
	for sent < min(d.window, d.n) {
		if err := send(); err != nil {
			return err
		}
	}
	for finished < d.n {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		res := m.GetResult()
		if res == nil {
			continue
		}
		finished++
		if err := stream.Send(&reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_ResultAck{ResultAck: &reevev1.ResultAck{Ref: res.GetRef(), Accepted: true}}}); err != nil {
			return err
		}
		if sent < d.n {
			if err := send(); err != nil {
				return err
			}
		}
	}
	close(d.done)
	<-stream.Context().Done()
	return nil
}

// BenchmarkStepRoundTrip is the CPU one step costs through the SDK: receive
// the assignment, ack, run a no-op handler, send the result, take the ack.
// The reported cpu-µs/step includes the in-process driver and both gRPC
// ends, so it is an upper bound of the SDK's own overhead.
func BenchmarkStepRoundTrip(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	d := &driver{n: b.N, window: 256, done: make(chan struct{})}
	g := grpc.NewServer()
	reevev1.RegisterAgentServiceServer(g, d)
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	a, err := agentsdk.New([]string{lis.Addr().String()}, agentsdk.WithMaxConcurrentSteps(256), agentsdk.WithLogger(quiet()))
	if err != nil {
		b.Fatal(err)
	}
	a.Handle("noop", func(context.Context, *agentsdk.Step) (any, error) { return nil, nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	cpu0 := cpuTime()
	b.ResetTimer()
	go func() { _ = a.Run(ctx); close(done) }()
	<-d.done
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/step")
	cancel()
	<-done
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }
