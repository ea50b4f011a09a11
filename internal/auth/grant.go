// Package auth authenticates the callers of Reeve's gRPC API (mutual TLS
// client certificates or bearer tokens) and authorizes every call by role
// and namespace, in one unary and one stream interceptor.
//
// An identity holds grants. A grant is written as a URI,
//
//	reeve://<role>/<namespace>[?step_types=a,b.*&agent_ids=pay-*]
//
// where role is client, agent, supervisor, approver or admin, namespace is a namespace
// or * for all, and for agents step_types and agent_ids restrict the step
// types it may register and the agent ids it may use (exact names, or a
// prefix followed by *; unrestricted when absent). Certificates carry grants
// as URI subject alternative names; the tokens file lists them per token.
//
//	a, err := auth.New(auth.Config{Certificates: true, Tokens: tokens})
//	g := grpc.NewServer(append(opts, a.ServerOptions()...)...)
//
// See docs/security.md.
package auth

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/reeve-org/reeve/internal/workflow"
)

// Role is what a caller may do; see docs/security.md for the methods each
// role may call.
type Role string

// The roles.
const (
	// RoleClient submits, reads, watches and cancels tasks and reads
	// workflows in its namespaces.
	RoleClient Role = "client"
	// RoleAgent connects to the agent stream and serves the step types its
	// grant allows.
	RoleAgent Role = "agent"
	// RoleSupervisor calls the recovery RPCs with an election fence.
	RoleSupervisor Role = "supervisor"
	// RoleAdmin (an operator) may call every client, workflow, alert and
	// recovery RPC, and complete waiting steps by name; it does not serve
	// steps.
	RoleAdmin Role = "admin"
	// RoleApprover completes the steps of its namespaces that wait for a
	// completion from outside, by name (CompleteStep with namespace, task
	// and step): a person's approval, a callback service. It reads
	// nothing else. (A completion by token needs no role.)
	RoleApprover Role = "approver"
)

// URIScheme is the scheme of grant URIs.
const URIScheme = "reeve"

// AllNamespaces as a grant's namespace matches every namespace.
const AllNamespaces = "*"

// Grant allows one role in one namespace (or all).
type Grant struct {
	Role      Role
	Namespace string
	// StepTypes and AgentIDs restrict an agent grant; empty means any.
	// Entries are exact names or a prefix followed by "*".
	StepTypes []string
	AgentIDs  []string
}

// URI returns the grant as a URI, the form certificates and the tokens file
// carry.
func (g Grant) URI() *url.URL {
	u := &url.URL{Scheme: URIScheme, Host: string(g.Role), Path: "/" + g.Namespace}
	q := url.Values{}
	if len(g.StepTypes) > 0 {
		q.Set("step_types", strings.Join(g.StepTypes, ","))
	}
	if len(g.AgentIDs) > 0 {
		q.Set("agent_ids", strings.Join(g.AgentIDs, ","))
	}
	u.RawQuery = q.Encode()
	return u
}

func (g Grant) String() string { return g.URI().String() }

// ParseGrant parses a grant URI.
func ParseGrant(s string) (Grant, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Grant{}, fmt.Errorf("auth: grant %q: %w", s, err)
	}
	return grantFromURI(u)
}

func grantFromURI(u *url.URL) (Grant, error) {
	bad := func(why string) (Grant, error) { return Grant{}, fmt.Errorf("auth: grant %q: %s", u.String(), why) }
	if u.Scheme != URIScheme {
		return bad("scheme must be " + URIScheme)
	}
	g := Grant{Role: Role(u.Host), Namespace: strings.TrimPrefix(u.Path, "/")}
	switch g.Role {
	case RoleClient, RoleAgent, RoleSupervisor, RoleAdmin, RoleApprover:
	default:
		return bad("role must be client, agent, supervisor, approver or admin")
	}
	if g.Namespace != AllNamespaces {
		if g.Namespace == "" {
			return bad("namespace required (or * for all)")
		}
		if err := workflow.ValidateNamespace("namespace", g.Namespace); err != nil {
			return bad(err.Error())
		}
	}
	q := u.Query()
	for k := range q {
		if k != "step_types" && k != "agent_ids" {
			return bad("unknown parameter " + k)
		}
	}
	if v := q.Get("step_types"); v != "" {
		g.StepTypes = strings.Split(v, ",")
	}
	if v := q.Get("agent_ids"); v != "" {
		g.AgentIDs = strings.Split(v, ",")
	}
	if g.Role != RoleAgent && (g.StepTypes != nil || g.AgentIDs != nil) {
		return bad("step_types and agent_ids apply to agent grants only")
	}
	return g, nil
}

// covers reports whether the grant allows role in namespace ns. Admin covers
// client, supervisor and approver.
func (g Grant) covers(role Role, ns string) bool {
	if g.Namespace != AllNamespaces && g.Namespace != ns {
		return false
	}
	return g.Role == role || (g.Role == RoleAdmin && (role == RoleClient || role == RoleSupervisor || role == RoleApprover))
}

// match reports whether name matches one of patterns (empty: any).
func match(patterns []string, name string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if p == name || (strings.HasSuffix(p, "*") && strings.HasPrefix(name, strings.TrimSuffix(p, "*"))) {
			return true
		}
	}
	return false
}

// Principal is an authenticated caller.
type Principal struct {
	// Name identifies the caller in logs and rate limits: the certificate's
	// common name ("cert:<cn>") or the token's name ("token:<name>").
	Name   string
	Grants []Grant
}

// Allows reports whether p may act as role in namespace ns.
func (p *Principal) Allows(role Role, ns string) bool {
	for _, g := range p.Grants {
		if g.covers(role, ns) {
			return true
		}
	}
	return false
}

func (p *Principal) hasRole(roles []Role) bool {
	for _, g := range p.Grants {
		for _, r := range roles {
			if g.covers(r, g.Namespace) {
				return true
			}
		}
	}
	return false
}

// AllowsAgent reports why p may not register as agent id serving types in
// ns, or "" when it may: every type must be allowed by one of p's agent
// grants for ns whose agent ids admit id.
func (p *Principal) AllowsAgent(ns, id string, types []string) string {
	var grants []Grant
	for _, g := range p.Grants {
		if g.covers(RoleAgent, ns) && match(g.AgentIDs, id) {
			grants = append(grants, g)
		}
	}
	if len(grants) == 0 {
		return fmt.Sprintf("register.agent_id: %s may not serve as agent %q in namespace %q", p.Name, id, ns)
	}
	for i, t := range types {
		ok := false
		for _, g := range grants {
			if match(g.StepTypes, t) {
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Sprintf("register.step_types[%d]: %s may not serve step type %q in namespace %q", i, p.Name, t, ns)
		}
	}
	return ""
}
