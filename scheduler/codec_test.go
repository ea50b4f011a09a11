package scheduler_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// rawCodec sends bytes as they are, to put what no proto encoder would
// produce on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// nested returns a google.protobuf.Value-typed field nested n list levels
// deep: SubmitTaskRequest.input (field 5) = Value{list_value{values:[...]}}.
func nested(n int) []byte {
	inner := []byte{}
	for range n {
		// Value.list_value (6) containing ListValue.values (1) = inner
		lv := append([]byte{0x0a}, varint(len(inner))...)
		lv = append(lv, inner...)
		inner = append(append([]byte{0x32}, varint(len(lv))...), lv...)
	}
	return append(append([]byte{0x2a}, varint(len(inner))...), inner...)
}

func varint(n int) []byte {
	var b []byte
	for n >= 0x80 {
		b = append(b, byte(n)|0x80)
		n >>= 7
	}
	return append(b, byte(n))
}

// A request that fails protobuf decoding is INVALID_ARGUMENT (as
// docs/security.md promises for bad input), on unary calls and on the agent
// stream, and changes nothing.
func TestUndecodableRequestsAreInvalidArgument(t *testing.T) {
	_, s, c := newEnv(t)
	cc := testenv.Dial(t, s.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cases := map[string][]byte{
		"garbage":       {0xff, 0xff, 0xff, 0xff},
		"invalid UTF-8": append([]byte{0x0a, 0x02}, 0xc3, 0x28), // namespace = "\xc3("
		"deep nesting":  nested(10000),
	}
	for name, body := range cases {
		var out []byte
		err := cc.Invoke(ctx, "/reeve.v1.SchedulerService/SubmitTask", &body, &out, grpc.ForceCodec(rawCodec{}))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "SubmitTaskRequest") {
			t.Errorf("%s: %v, want INVALID_ARGUMENT naming the request", name, err)
		}
	}
	stream, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/reeve.v1.AgentService/Connect", grpc.ForceCodec(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	garbage := []byte{0xff, 0xff, 0xff}
	if err := stream.SendMsg(&garbage); err != nil {
		t.Fatal(err)
	}
	var out []byte
	if err := stream.RecvMsg(&out); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("garbage on the agent stream: %v, want INVALID_ARGUMENT", err)
	}
	resp, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{})
	if err != nil || len(resp.GetTasks()) != 0 {
		t.Fatalf("after undecodable requests: %d tasks, %v; want none", len(resp.GetTasks()), err)
	}
}
