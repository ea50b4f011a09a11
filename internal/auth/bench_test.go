package auth_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/auth"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

// BenchmarkUnaryInterceptor measures what role checks add to one unary call
// (authentication from a verified certificate or a token, the method's rule,
// the namespace check), without the network or TLS handshake.
func BenchmarkUnaryInterceptor(b *testing.B) {
	dir := b.TempDir()
	if _, err := tlsconfig.Init(dir, []tlsconfig.CertSpec{{Name: "client", URIs: grants("reeve://client/a", "reeve://client/b")}}, tlsconfig.InitOptions{}); err != nil {
		b.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "client.pem"))
	if err != nil {
		b.Fatal(err)
	}
	blk, _ := pem.Decode(raw)
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		b.Fatal(err)
	}
	tokens, err := auth.ParseTokens([]byte(`tokens: [{name: ci, token: ` + clientToken + `, grants: ["reeve://client/a"]}]`))
	if err != nil {
		b.Fatal(err)
	}
	a := auth.New(auth.Config{Certificates: true, Tokens: tokens})
	tlsPeer := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}}})
	info := &grpc.UnaryServerInfo{FullMethod: reevev1.SchedulerService_GetTask_FullMethodName}
	req := &reevev1.GetTaskRequest{Namespace: "b", TaskId: "t"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for _, bc := range []struct {
		name string
		ctx  context.Context
	}{
		{"certificate", tlsPeer},
		{"token", metadata.NewIncomingContext(tlsPeer, metadata.Pairs("authorization", "Bearer "+clientToken))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.name == "token" {
				req.Namespace = "a"
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.Unary(bc.ctx, req, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
