package auth_test

import (
	"strings"
	"testing"

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
