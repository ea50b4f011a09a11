package conformance

import (
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// Field numbers no version of the protocol uses yet: what a newer scheduler
// might send. futureVariant is a ConnectResponse.msg variant (a message
// kind), futureField a field of StepAssignment.
const (
	futureVariant = 1000
	futureField   = 1001
)

// futureMessage is a ConnectResponse of a kind the agent cannot know,
// crafted as raw bytes: a length-delimited field 1000 holding a small
// message, as a new oneof variant would be encoded.
func futureMessage() *reevev1.ConnectResponse {
	inner := protowire.AppendTag(nil, 1, protowire.BytesType)
	inner = protowire.AppendString(inner, "from the future")
	raw := protowire.AppendTag(nil, futureVariant, protowire.BytesType)
	raw = protowire.AppendBytes(raw, inner)
	m := &reevev1.ConnectResponse{}
	m.ProtoReflect().SetUnknown(raw)
	return m
}

// withFutureField adds a field the agent cannot know to an assignment.
func withFutureField(as *reevev1.StepAssignment) {
	raw := protowire.AppendTag(nil, futureField, protowire.VarintType)
	raw = protowire.AppendVarint(raw, 42)
	as.ProtoReflect().SetUnknown(raw)
}

// caseUnknownMessage: a message kind from a newer scheduler, and an
// assignment with a field from a newer scheduler, are ignored; the agent
// keeps its stream and runs the assignment.
func caseUnknownMessage(d *driver, c *caseRun) error {
	if err := d.ready(c); err != nil {
		return err
	}
	s := d.cur
	if err := d.send(futureMessage()); err != nil {
		return err
	}
	ex, err := d.assignAcked(assignment{cfg: StepConfig{Mode: ModeEcho}, input: "after a message from the future", future: true, completeBy: time.Now().Add(30 * time.Second)})
	if err != nil {
		return c.fatalf("after a message kind the agent does not know: %v (ignore unknown message kinds and fields; keep the stream)", err)
	}
	r, err := d.waitResult(ex, resultTimeout)
	if err != nil {
		return c.fatalf("after a message kind the agent does not know: %v (ignore unknown message kinds and fields; keep the stream)", err)
	}
	d.checkEcho(ex, r, nil)
	if err := d.quiet(300 * time.Millisecond); err != nil {
		return c.fatalf("the agent ended its stream after a message kind it does not know (%v); ignore it and keep the stream", err)
	}
	if d.cur != s {
		c.errorf("the agent reconnected after a message kind it does not know; ignore it and keep the stream")
	}
	return nil
}
