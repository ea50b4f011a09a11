package auth_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/auth"
)

// A completion by token needs no role, only an authenticated caller: the
// token is the capability (the scheduler verifies it). Without
// credentials it is refused UNAUTHENTICATED.
func TestCompleteStepByToken(t *testing.T) {
	seen := &admitted{ids: map[string]bool{}}
	e := newSecureEnv(t, seen.serverOptions()...)
	n := 0
	for _, cert := range []string{"client-a", "agent-of-a", "supervisor-a", "admin-a", "approver-a", "nobody"} {
		cc := e.conn(t, cert, "")
		for _, ns := range []string{"", "a", "b"} {
			n++
			id := fmt.Sprint("token-", n)
			ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-call-id", id), wait)
			err := cc.Invoke(ctx, reevev1.SchedulerService_CompleteStep_FullMethodName,
				&reevev1.CompleteStepRequest{Namespace: ns, Token: "rvt1.anything"}, &reevev1.CompleteStepResponse{})
			cancel()
			if !seen.has(id) {
				t.Errorf("CompleteStep by token as %s (namespace %q): refused by the authorizer: %v", cert, ns, err)
			}
		}
	}
	cc := e.conn(t, "", "")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err := reevev1.NewSchedulerServiceClient(cc).CompleteStep(ctx, &reevev1.CompleteStepRequest{Token: "rvt1.anything"})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("CompleteStep by token without credentials: %v, want UNAUTHENTICATED", err)
	}
}

// The approver grant parses, and admin covers it.
func TestApproverGrant(t *testing.T) {
	g, err := auth.ParseGrant("reeve://approver/a")
	if err != nil || g.Role != auth.RoleApprover || g.Namespace != "a" {
		t.Fatalf("ParseGrant = %+v, %v", g, err)
	}
	for _, tc := range []struct {
		grant string
		ns    string
		want  bool
	}{
		{"reeve://approver/a", "a", true},
		{"reeve://approver/a", "b", false},
		{"reeve://admin/a", "a", true},
		{"reeve://approver/*", "b", true},
		{"reeve://client/a", "a", false},
	} {
		g, err := auth.ParseGrant(tc.grant)
		if err != nil {
			t.Fatal(err)
		}
		p := &auth.Principal{Name: "p", Grants: []auth.Grant{g}}
		if got := p.Allows(auth.RoleApprover, tc.ns); got != tc.want {
			t.Errorf("%s allows approver in %q: %v, want %v", tc.grant, tc.ns, got, tc.want)
		}
	}
}
