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
// Written outside in, in time linear in n (wrapping the inner bytes level
// by level copies them n times: seconds under the race detector).
func nested(n int) []byte {
	// value[i] is the size of the Value nested i deep (0: empty), list[i]
	// that of the ListValue inside it, holding value[i-1].
	value, list := make([]int, n+1), make([]int, n+1)
	for i := 1; i <= n; i++ {
		list[i] = 1 + len(varint(value[i-1])) + value[i-1]
		value[i] = 1 + len(varint(list[i])) + list[i]
	}
	b := append([]byte{0x2a}, varint(value[n])...)
	for i := n; i >= 1; i-- {
		// Value.list_value (6), then ListValue.values (1)
		b = append(append(b, 0x32), varint(list[i])...)
		b = append(append(b, 0x0a), varint(value[i-1])...)
	}
	return b
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
	cases := map[string][]byte{
		"garbage":       {0xff, 0xff, 0xff, 0xff},
		"invalid UTF-8": append([]byte{0x0a, 0x02}, 0xc3, 0x28), // namespace = "\xc3("
		"deep nesting":  nested(10000),
	}
	for name, body := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		var out []byte
		err := cc.Invoke(ctx, "/reeve.v1.SchedulerService/SubmitTask", &body, &out, grpc.ForceCodec(rawCodec{}))
		cancel()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "SubmitTaskRequest") {
			t.Errorf("%s: %v, want INVALID_ARGUMENT naming the request", name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
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
