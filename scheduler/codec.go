package scheduler

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	protov2 "google.golang.org/protobuf/proto"
)

// gRPC turns a request its codec cannot decode (invalid UTF-8, nesting too
// deep, garbage) into INTERNAL, whatever the codec returns. The scheduler
// answers INVALID_ARGUMENT instead: its codec records the decode error
// against the message and reports success, and the interceptors that
// ServerOptions installs with it fail the call before any handler sees the
// message. The record lives only between the two, a few instructions apart.

// decodeCodec is gRPC's proto codec, remembering decode errors.
type decodeCodec struct {
	encoding.CodecV2
	failed *sync.Map // message -> error
}

func newDecodeCodec() decodeCodec {
	return decodeCodec{CodecV2: encoding.GetCodecV2(proto.Name), failed: &sync.Map{}}
}

func (c decodeCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if err := c.CodecV2.Unmarshal(data, v); err != nil {
		c.failed.Store(v, err)
	}
	return nil
}

// check returns INVALID_ARGUMENT when m failed to decode.
func (c decodeCodec) check(m any) error {
	e, ok := c.failed.LoadAndDelete(m)
	if !ok {
		return nil
	}
	name := "request"
	if pm, ok := m.(protov2.Message); ok {
		name = string(pm.ProtoReflect().Descriptor().FullName())
	}
	return statusErr(refuse(codes.InvalidArgument, ReasonMalformedRequest, "request: not a valid %s: %v", name, e))
}

func (c decodeCodec) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := c.check(req); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (c decodeCodec) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, checkedStream{ServerStream: ss, c: c})
}

// checkedStream fails RecvMsg for a message that did not decode.
type checkedStream struct {
	grpc.ServerStream
	c decodeCodec
}

func (s checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.c.check(m)
}

// decodeOptions are the server options that map decode errors to
// INVALID_ARGUMENT; they work only together.
func decodeOptions() []grpc.ServerOption {
	c := newDecodeCodec()
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(c),
		grpc.ChainUnaryInterceptor(c.unary),
		grpc.ChainStreamInterceptor(c.stream),
	}
}
