package auth_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/auth"
)

func TestParseGrantRefusesMalformedGrants(t *testing.T) {
	cases := []struct{ in, want string }{
		{"https://client/a", "scheme"},
		{"reeve://root/a", "role"},
		{"reeve://client/", "namespace required"},
		{"reeve://client/Bad_NS", "namespace"},
		{"reeve://client/a?step_types=x", "agent grants only"},
		{"reeve://agent/a?colour=red", "unknown parameter"},
	}
	for _, tc := range cases {
		if _, err := auth.ParseGrant(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseGrant(%q) = %v, want an error about %q", tc.in, err, tc.want)
		}
	}
	g, err := auth.ParseGrant("reeve://agent/a?step_types=pay.*,ship&agent_ids=a-*")
	if err != nil {
		t.Fatal(err)
	}
	back, err := auth.ParseGrant(g.String())
	if err != nil || back.String() != g.String() {
		t.Fatalf("round trip of %v gave %v, %v", g, back, err)
	}
	p := &auth.Principal{Name: "x", Grants: []auth.Grant{g}}
	for _, tc := range []struct {
		ns, id string
		types  []string
		ok     bool
	}{
		{"a", "a-1", []string{"pay.charge", "ship"}, true},
		{"a", "a-1", []string{"pay"}, false}, // "pay.*" needs the dot
		{"a", "a-1", []string{"shipping"}, false},
		{"a", "b-1", []string{"ship"}, false},
		{"b", "a-1", []string{"ship"}, false},
	} {
		if why := p.AllowsAgent(tc.ns, tc.id, tc.types); (why == "") != tc.ok {
			t.Errorf("AllowsAgent(%s, %s, %v) = %q, want allowed=%v", tc.ns, tc.id, tc.types, why, tc.ok)
		}
	}
}

func TestParseTokensRefusesWeakOrBrokenEntries(t *testing.T) {
	cases := []struct{ in, want string }{
		{`tokens: [{name: a, token: short, grants: ["reeve://client/a"]}]`, "at least 16"},
		{`tokens: [{name: a, sha256: abc, grants: ["reeve://client/a"]}]`, "64 hex digits"},
		{`tokens: [{token: 0123456789abcdef0, grants: ["reeve://client/a"]}]`, "name: required"},
		{`tokens: [{name: a, token: 0123456789abcdef0, grants: []}]`, "at least one"},
		{`tokens: [{name: a, token: 0123456789abcdef0, grants: ["reeve://god/a"]}]`, "grants[0]"},
		{`tokens: [{name: a, token: 0123456789abcdef0, grants: ["reeve://client/a"], extra: 1}]`, "unknown field"},
		{`tokens: [{name: a, token: 0123456789abcdef0, grants: ["reeve://client/a"]}, {name: b, token: 0123456789abcdef0, grants: ["reeve://client/b"]}]`, "duplicate"},
	}
	for _, tc := range cases {
		if _, err := auth.ParseTokens([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseTokens(%s) = %v, want an error about %q", tc.in, err, tc.want)
		}
	}
	tok, entry, err := auth.NewToken("ci", []auth.Grant{{Role: auth.RoleClient, Namespace: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := auth.MarshalTokensFile([]auth.TokenEntry{entry})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), tok) {
		t.Fatalf("tokens file holds the token itself: %s", b)
	}
	if _, err := auth.ParseTokens(b); err != nil {
		t.Fatalf("generated tokens file: %v", err)
	}
}

func TestSetTokensReplacesTheAcceptedTokens(t *testing.T) {
	old, err := auth.ParseTokens([]byte(`tokens: [{name: old, token: old-token-0123456789, grants: ["reeve://client/a"]}]`))
	if err != nil {
		t.Fatal(err)
	}
	next, err := auth.ParseTokens([]byte(`tokens: [{name: new, token: new-token-0123456789, grants: ["reeve://client/a"]}]`))
	if err != nil {
		t.Fatal(err)
	}
	a := auth.New(auth.Config{Tokens: old})
	call := func(tok string) error {
		ctx := metadata.NewIncomingContext(peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{}}), metadata.Pairs("authorization", "Bearer "+tok))
		_, err := a.Unary(ctx, &reevev1.GetTaskRequest{Namespace: "a", TaskId: "t"}, &grpc.UnaryServerInfo{FullMethod: reevev1.SchedulerService_GetTask_FullMethodName},
			func(context.Context, any) (any, error) { return nil, nil })
		return err
	}
	if err := call("old-token-0123456789"); err != nil {
		t.Fatalf("old token before the reload: %v", err)
	}
	a.SetTokens(next)
	if err := call("old-token-0123456789"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("old token after the reload: %v, want Unauthenticated", err)
	}
	if err := call("new-token-0123456789"); err != nil {
		t.Fatalf("new token after the reload: %v", err)
	}
}

func TestTokenOverPlaintextIsRefused(t *testing.T) {
	tokens, err := auth.ParseTokens([]byte(`tokens: [{name: ci, token: plain-token-0123456789, grants: ["reeve://admin/*"]}]`))
	if err != nil {
		t.Fatal(err)
	}
	a := auth.New(auth.Config{Tokens: tokens})
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer plain-token-0123456789"))
	_, err = a.Unary(ctx, &reevev1.GetTaskRequest{TaskId: "t"}, &grpc.UnaryServerInfo{FullMethod: reevev1.SchedulerService_GetTask_FullMethodName},
		func(context.Context, any) (any, error) { return nil, nil })
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "TLS only") {
		t.Fatalf("token without TLS: %v, want Unauthenticated", err)
	}
}

func TestRefusedCallsAreLogged(t *testing.T) {
	var buf strings.Builder
	a := auth.New(auth.Config{Certificates: true, Log: slog.New(slog.NewTextHandler(&buf, nil))})
	_, err := a.Unary(context.Background(), &reevev1.GetTaskRequest{TaskId: "t"}, &grpc.UnaryServerInfo{FullMethod: reevev1.SchedulerService_GetTask_FullMethodName},
		func(context.Context, any) (any, error) { return nil, nil })
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("anonymous call: %v", err)
	}
	if !strings.Contains(buf.String(), "call refused") || !strings.Contains(buf.String(), "GetTask") || !strings.Contains(buf.String(), "Unauthenticated") {
		t.Fatalf("log %q does not record the refusal", buf.String())
	}
}
