package conformance

import (
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/scheduler"
)

// harness serves AgentService and hands every new stream to the driver.
type harness struct {
	reevev1.UnimplementedAgentServiceServer

	sessions chan *session
	closed   chan struct{}
}

// session is one agent stream. The driver is the only caller of Send after
// the handler handed the session over; the handler's goroutine only
// receives.
type session struct {
	stream reevev1.AgentService_ConnectServer
	first  *reevev1.ConnectRequest
	opened time.Time

	in      chan *reevev1.ConnectRequest // closed when the agent's side ended
	recvErr error                        // why in was closed; read after it is
	end     chan error                   // the handler returns what is sent here
	ended   sync.Once
}

func (h *harness) Connect(stream reevev1.AgentService_ConnectServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	s := &session{stream: stream, first: first, opened: time.Now(), in: make(chan *reevev1.ConnectRequest, 1024), end: make(chan error, 1)}
	select {
	case h.sessions <- s:
	case <-h.closed:
		return status.Error(codes.Unavailable, "conformance suite finished")
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
	go func() {
		defer close(s.in)
		for {
			m, err := stream.Recv()
			if err != nil {
				s.recvErr = err
				return
			}
			select {
			case s.in <- m:
			case <-stream.Context().Done():
				s.recvErr = stream.Context().Err()
				return
			}
		}
	}()
	select {
	case err := <-s.end:
		return err
	case <-h.closed:
		return status.Error(codes.Unavailable, "conformance suite finished")
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
}

// close ends the stream with err (nil: OK). Safe to call twice.
func (s *session) close(err error) {
	s.ended.Do(func() { s.end <- err })
}

// server is the gRPC side of a Suite.
type server struct {
	h   *harness
	g   *grpc.Server
	lis net.Listener
}

func startServer(listen string, opts []grpc.ServerOption) (*server, error) {
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	h := &harness{sessions: make(chan *session), closed: make(chan struct{})}
	g := grpc.NewServer(append(scheduler.ServerOptions(), opts...)...)
	reevev1.RegisterAgentServiceServer(g, h)
	go func() { _ = g.Serve(lis) }()
	return &server{h: h, g: g, lis: lis}, nil
}

// stop ends every stream and the server, forcefully after a second.
func (s *server) stop() {
	close(s.h.closed)
	done := make(chan struct{})
	go func() { s.g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		s.g.Stop()
		<-done
	}
}
