// Package dial connects a client of the schedulers — the reeve command, the
// console, a supervisor, bench, the chaos suite — to one scheduler or to
// several, over plaintext or TLS (mutual TLS with a client certificate), with
// a bearer token. It is the one place those connections are set up; agents
// use agentsdk, which connects on its own.
//
//	cc, err := dial.Schedulers(dial.Config{
//		Address: "sched-1:7430,sched-2:7430",
//		CA:      "ca.pem", Cert: "client.pem", Key: "client-key.pem",
//	}, telemetry.ClientHandler())
//
// Several addresses spread the calls round-robin over the schedulers that
// are up; a scheduler that fails is skipped until it answers again. Over TLS
// each is verified against its own host name unless Config.ServerName says
// otherwise.
//
// Hint explains the transport errors of a TLS mismatch in the words of the
// caller's settings; the reeve command prints it, the Go client adds it to
// its errors (HintInterceptors) and the agent SDK logs it.
package dial

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/reeve-org/reeve/internal/auth"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

// Config says which schedulers to reach and how. The zero value of every
// field but Address is plaintext with no credentials.
type Config struct {
	// Address is one scheduler's host:port, or several comma-separated
	// (spaces around them are ignored). Required.
	Address string
	// TLS turns TLS on; the schedulers' certificates are verified against
	// the system's roots unless CA is set. Default off; CA and ServerName
	// imply it.
	TLS bool
	// CA is a PEM file of the CA certificates the schedulers' certificates
	// must chain to. Default: the system's roots.
	CA string
	// Cert and Key are PEM files of the client certificate presented to the
	// schedulers (mutual TLS). Default none; they need TLS.
	Cert, Key string
	// ServerName is the name every scheduler's certificate is verified
	// against. Default: the host of each address.
	ServerName string
	// Token is a bearer token sent with every call. Default none; it needs
	// TLS (gRPC never sends it in plaintext).
	Token string
}

// Field names of a Config, as Error reports them.
const (
	FieldAddress = "Address"
	FieldCert    = "Cert"
	FieldKey     = "Key"
	FieldToken   = "Token"
	// FieldTLSFiles is a CA, certificate or key file that cannot be read or
	// parsed; the reason names which.
	FieldTLSFiles = "CA/Cert/Key"
)

// Error is a Config that cannot be used. Field is one of the Field*
// constants, so that a command can name its own flag.
type Error struct {
	Field  string
	Reason string
}

func (e *Error) Error() string { return e.Field + ": " + e.Reason }

// Addresses splits a comma-separated list of host:port addresses. It fails
// with an *Error naming FieldAddress when the list is empty or an address is
// not host:port.
func Addresses(list string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			reason := "want host:port"
			if err != nil {
				reason = err.Error()
			}
			return nil, &Error{Field: FieldAddress, Reason: fmt.Sprintf("%q: %s", a, reason)}
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, &Error{Field: FieldAddress, Reason: fmt.Sprintf("want host:port[,host:port...], got %q", list)}
	}
	return out, nil
}

// UsesTLS reports whether c asks for TLS.
func (c Config) UsesTLS() bool { return c.TLS || c.CA != "" || c.ServerName != "" }

// TLSConfig returns c's client TLS configuration (built by
// tlsconfig.Client), nil for plaintext. It fails with an *Error when a
// client certificate or a token is set without TLS, or a file cannot be
// used.
func (c Config) TLSConfig() (*tls.Config, error) {
	if !c.UsesTLS() {
		switch {
		case c.Cert != "" || c.Key != "":
			field := FieldCert
			if c.Cert == "" {
				field = FieldKey
			}
			return nil, &Error{Field: field, Reason: "a client certificate needs TLS"}
		case c.Token != "":
			return nil, &Error{Field: FieldToken, Reason: "tokens are sent over TLS only"}
		}
		return nil, nil
	}
	cfg, err := tlsconfig.Client(tlsconfig.Files{CA: c.CA, Cert: c.Cert, Key: c.Key}, c.ServerName)
	if err != nil {
		return nil, &Error{Field: FieldTLSFiles, Reason: err.Error()}
	}
	return cfg, nil
}

// options returns the transport credentials and the token of c.
func (c Config) options() ([]grpc.DialOption, error) {
	cfg, err := c.TLSConfig()
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
	if c.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.Token(c.Token)))
	}
	return opts, nil
}

// Schedulers returns a connection to the schedulers of c, with extra (a
// telemetry stats handler, interceptors) after c's own options. Like
// grpc.NewClient it does not connect yet: an unreachable scheduler shows in
// the first call. One address is dialed as grpc.NewClient would (its name
// resolved by DNS); several are spread over round-robin, each verified
// against its own host name over TLS unless ServerName is set. Errors about
// c are *Error.
func Schedulers(c Config, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	addrs, err := Addresses(c.Address)
	if err != nil {
		return nil, err
	}
	opts, err := c.options()
	if err != nil {
		return nil, err
	}
	target := addrs[0]
	if len(addrs) > 1 {
		target, opts = roundRobin(addrs, opts)
	}
	cc, err := grpc.NewClient(target, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("dial %q: %w", c.Address, err)
	}
	return cc, nil
}

// roundRobin returns the target and options of a connection spreading
// calls over addrs: a resolver of its own that names each address with its
// host as the TLS server name, and the round_robin balancer, which skips a
// scheduler while it is not ready.
func roundRobin(addrs []string, opts []grpc.DialOption) (string, []grpc.DialOption) {
	r := manual.NewBuilderWithScheme("reeve")
	var state resolver.State
	for _, a := range addrs {
		host, _, _ := net.SplitHostPort(a) // checked by Addresses
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a, ServerName: host})
	}
	r.InitialState(state)
	return r.Scheme() + ":///schedulers", append(opts, grpc.WithResolvers(r),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))
}
