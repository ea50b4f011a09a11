package auth

import (
	"context"

	"google.golang.org/grpc/credentials"
)

// Token returns per-RPC credentials that send tok as a bearer token. gRPC
// sends them over TLS connections only.
func Token(tok string) credentials.PerRPCCredentials { return tokenCreds(tok) }

type tokenCreds string

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (tokenCreds) RequireTransportSecurity() bool { return true }
