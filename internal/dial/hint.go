package dial

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Settings names a program's TLS settings in a transport hint: the
// command's flags, or the options of the Go client or the agent SDK.
type Settings struct {
	// CA is the setting of the CA that schedulers' certificates chain to,
	// which turns TLS on (e.g. "--tls-ca (REEVE_TLS_CA)").
	CA string
	// ClientCert is the setting of a client certificate for mutual TLS
	// (e.g. "--tls-cert/--tls-key").
	ClientCert string
	// Plaintext says which settings to drop to connect in plaintext (e.g.
	// "drop --tls, --tls-ca, --tls-cert and --tls-key").
	Plaintext string
}

// Hint explains the transport errors gRPC gives a plaintext client of a
// TLS scheduler ("error reading server preface: EOF"), a TLS client of a
// plaintext scheduler, and a client certificate the scheduler refuses,
// naming the settings s; it returns "" for any other error (err may wrap a
// status). It is the one place those errors are explained: the reeve
// command prints it, the client adds it to the error's message
// (HintInterceptors) and the agent SDK logs it.
func Hint(err error, s Settings) string {
	if err == nil || status.Code(err) != codes.Unavailable {
		return ""
	}
	switch msg := err.Error(); {
	case strings.Contains(msg, "tls: bad certificate"), strings.Contains(msg, "tls: certificate required"):
		return "the scheduler refused this client certificate: missing, expired, revoked (--tls-crl) or not issued by its --tls-client-ca (see docs/security.md)"
	case strings.Contains(msg, "server preface"):
		return "the scheduler may serve TLS: set " + s.CA + " and, for mutual TLS, " + s.ClientCert + " (see docs/security.md)"
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "the scheduler serves plaintext: " + s.Plaintext
	}
	return ""
}

// HintInterceptors return interceptors that add Hint(err, s) to the
// message of an UNAVAILABLE error a call (or a stream) ends with, as
// "MESSAGE (hint: HINT)", keeping its code and details.
func HintInterceptors(s Settings) []grpc.DialOption {
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return withHint(invoker(ctx, method, req, reply, cc, opts...), s)
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, withHint(err, s)
		}
		return &hintStream{ClientStream: cs, s: s}, nil
	}
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream)}
}

// withHint returns err with its hint added to its status message, or err
// as it is when there is no hint.
func withHint(err error, s Settings) error {
	h := Hint(err, s)
	if h == "" {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	p := st.Proto()
	p.Message += " (hint: " + h + ")"
	return status.ErrorProto(p)
}

type hintStream struct {
	grpc.ClientStream
	s Settings
}

func (h *hintStream) RecvMsg(m any) error { return withHint(h.ClientStream.RecvMsg(m), h.s) }
func (h *hintStream) SendMsg(m any) error { return withHint(h.ClientStream.SendMsg(m), h.s) }
