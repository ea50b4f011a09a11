package auth

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// Config configures an Authorizer.
type Config struct {
	// Certificates trusts the grants in verified client certificates (the
	// server must verify them: see tlsconfig.Server).
	Certificates bool
	// Tokens are the accepted bearer tokens. Tokens are accepted over TLS
	// only.
	Tokens Tokens
	// Revoked, when set, is asked on every call authenticated by a client
	// certificate (with the connection's verified chains) and refuses the
	// call UNAUTHENTICATED when it returns an error: a certificate revoked
	// after its connection was established is refused its next calls
	// (tlsconfig.Reloadable.CheckRevoked). Calls and streams already running
	// are not interrupted. Default none.
	Revoked func(verifiedChains [][]*x509.Certificate) error
	// Log, when set, records every refused call (method, caller, peer
	// address, code) at warn level, for security monitoring. Default none.
	Log *slog.Logger
}

// Authorizer authenticates and authorizes every call through its
// interceptors. It is safe for concurrent use.
type Authorizer struct {
	cfg    Config
	tokens atomic.Pointer[Tokens]
}

// New returns an Authorizer.
func New(cfg Config) *Authorizer {
	a := &Authorizer{cfg: cfg}
	a.SetTokens(cfg.Tokens)
	return a
}

// SetTokens replaces the accepted tokens (after the tokens file changed);
// calls in flight finish with the old set.
func (a *Authorizer) SetTokens(t Tokens) { a.tokens.Store(&t) }

// ServerOptions returns the interceptors to pass to grpc.NewServer.
func (a *Authorizer) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.Unary), grpc.ChainStreamInterceptor(a.Stream)}
}

type principalKey struct{}

// FromContext returns the caller authenticated by the interceptors, or nil
// when authorization is off.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// rule says who may call a method. roles: any grant of one of them (in the
// request's namespace) is enough; check, when set, judges the request.
type rule struct {
	roles []Role
	open  bool // no authentication (health checks)
	any   bool // any authenticated caller (reflection)
	check func(p *Principal, req any) error
}

var (
	clientRoles = []Role{RoleClient}
	adminRoles  = []Role{RoleAdmin}
)

// rules maps every full method name to its rule; a method not listed is
// refused (PERMISSION_DENIED).
var rules = map[string]rule{
	reevev1.SchedulerService_SubmitTask_FullMethodName:               {roles: clientRoles, check: namespaceOf(RoleClient)},
	reevev1.SchedulerService_GetTask_FullMethodName:                  {roles: clientRoles, check: namespaceOf(RoleClient)},
	reevev1.SchedulerService_ListTasks_FullMethodName:                {roles: clientRoles, check: namespaceOf(RoleClient)},
	reevev1.SchedulerService_WatchTask_FullMethodName:                {roles: clientRoles, check: namespaceOf(RoleClient)},
	reevev1.SchedulerService_CountTasks_FullMethodName:               {roles: clientRoles, check: namespaceOf(RoleClient)},
	reevev1.SchedulerService_WatchTasks_FullMethodName:               {roles: clientRoles, check: namespaceOf(RoleClient)},
	reevev1.SchedulerService_ListAgents_FullMethodName:               {roles: clientRoles, check: namespaceOf(RoleClient)},
	reevev1.SchedulerService_CancelTask_FullMethodName:               {roles: clientRoles, check: namespaceOf(RoleClient)},
	reevev1.SchedulerService_GetWorkflow_FullMethodName:              {roles: clientRoles, check: namespaceOf(RoleClient)},
	reevev1.SchedulerService_ListWorkflows_FullMethodName:            {roles: clientRoles, check: namespaceOf(RoleClient)},
	reevev1.SchedulerService_RegisterWorkflow_FullMethodName:         {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.SchedulerService_RerunTask_FullMethodName:                {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.SchedulerService_CompleteStep_FullMethodName:             {any: true, check: completeStep},
	reevev1.SchedulerService_GetCompletionToken_FullMethodName:       {roles: []Role{RoleApprover, RoleAdmin}, check: namespaceOf(RoleApprover)},
	reevev1.SchedulerService_ListWaitingSteps_FullMethodName:         {roles: []Role{RoleClient, RoleApprover, RoleAdmin}, check: clientOrApprover},
	reevev1.SupervisorService_RetryStep_FullMethodName:               {roles: []Role{RoleSupervisor, RoleAdmin}, check: recovery},
	reevev1.SupervisorService_CompensateTask_FullMethodName:          {roles: []Role{RoleSupervisor, RoleAdmin}, check: recovery},
	reevev1.SupervisorService_FailTask_FullMethodName:                {roles: []Role{RoleSupervisor, RoleAdmin}, check: recovery},
	reevev1.SupervisorService_RecoverSteps_FullMethodName:            {roles: []Role{RoleSupervisor, RoleAdmin}, check: recoverSteps},
	reevev1.SupervisorService_PauseTask_FullMethodName:               {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.BatchService_StartBatch_FullMethodName:                   {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.BatchService_GetBatch_FullMethodName:                     {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.BatchService_ListBatches_FullMethodName:                  {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.BatchService_CancelBatch_FullMethodName:                  {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.SupervisorService_ResumeTask_FullMethodName:              {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.SupervisorService_ListAlerts_FullMethodName:              {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.SupervisorService_WatchAlerts_FullMethodName:             {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.SupervisorService_AckAlert_FullMethodName:                {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.SupervisorService_FireSchedules_FullMethodName:           {roles: []Role{RoleSupervisor, RoleAdmin}, check: fireSchedules},
	reevev1.ScheduleService_CreateSchedule_FullMethodName:            {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.ScheduleService_UpdateSchedule_FullMethodName:            {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.ScheduleService_PauseSchedule_FullMethodName:             {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.ScheduleService_ResumeSchedule_FullMethodName:            {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.ScheduleService_TriggerSchedule_FullMethodName:           {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.ScheduleService_BackfillSchedule_FullMethodName:          {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.ScheduleService_DeleteSchedule_FullMethodName:            {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.ScheduleService_GetSchedule_FullMethodName:               {roles: clientRoles, check: namespaceOf(RoleClient)},
	reevev1.ScheduleService_ListSchedules_FullMethodName:             {roles: clientRoles, check: namespaceOf(RoleClient)},
	reevev1.QueueService_SetQueueLimit_FullMethodName:                {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.QueueService_PauseQueue_FullMethodName:                   {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.QueueService_ResumeQueue_FullMethodName:                  {roles: adminRoles, check: namespaceOf(RoleAdmin)},
	reevev1.QueueService_ListQueues_FullMethodName:                   {roles: clientRoles, check: namespaceOf(RoleClient)},
	reevev1.AgentService_Connect_FullMethodName:                      {roles: []Role{RoleAgent}, check: agentRegister},
	"/grpc.health.v1.Health/Check":                                   {open: true},
	"/grpc.health.v1.Health/Watch":                                   {open: true},
	"/grpc.health.v1.Health/List":                                    {open: true},
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      {any: true},
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": {any: true},
}

// Undecided returns the methods of services (a grpc.Server's
// GetServiceInfo) that have no rule, sorted. Such a method would be refused
// to everyone: a server should not start with one (see cmd/reeve serve), so
// that adding an RPC without deciding who may call it cannot go unnoticed.
func Undecided(services map[string]grpc.ServiceInfo) []string {
	var out []string
	for name, svc := range services {
		for _, m := range svc.Methods {
			if full := "/" + name + "/" + m.Name; !hasRule(full) {
				out = append(out, full)
			}
		}
	}
	slices.Sort(out)
	return out
}

func hasRule(method string) bool {
	_, ok := rules[method]
	return ok
}

// requestNamespace returns the namespace a request names, "default" when
// empty.
func requestNamespace(req any) string {
	switch r := req.(type) {
	case *reevev1.RegisterWorkflowRequest:
		return workflow.Namespace(r.GetWorkflow().GetNamespace())
	case *reevev1.CreateScheduleRequest:
		return workflow.Namespace(r.GetSchedule().GetNamespace())
	case *reevev1.UpdateScheduleRequest:
		return workflow.Namespace(r.GetSchedule().GetNamespace())
	case interface{ GetNamespace() string }:
		return workflow.Namespace(r.GetNamespace())
	}
	return workflow.DefaultNamespace
}

func namespaceOf(role Role) func(*Principal, any) error {
	return func(p *Principal, req any) error {
		ns := requestNamespace(req)
		if !p.Allows(role, ns) {
			return status.Errorf(codes.PermissionDenied, "namespace: %s may not act as %s in namespace %q", p.Name, role, ns)
		}
		return nil
	}
}

// recovery: a supervisor acts with a fence; without one the call is an
// operator action, for admins only.
func recovery(p *Principal, req any) error {
	ns := requestNamespace(req)
	fenced := false
	if f, ok := req.(interface{ GetFence() *reevev1.Fence }); ok {
		fenced = f.GetFence() != nil
	}
	if p.Allows(RoleAdmin, ns) || (fenced && p.Allows(RoleSupervisor, ns)) {
		return nil
	}
	if !fenced && p.Allows(RoleSupervisor, ns) {
		return status.Errorf(codes.PermissionDenied, "fence: %s is a supervisor: a recovery without a fence is an operator action (admin role)", p.Name)
	}
	return status.Errorf(codes.PermissionDenied, "namespace: %s may not recover tasks in namespace %q", p.Name, ns)
}

// completeStep: by token, any authenticated caller (the token is the
// capability: the scheduler verifies it, and it names its namespace); by
// name, the approver role (an admin is one too) of the namespace.
func completeStep(p *Principal, req any) error {
	r := req.(*reevev1.CompleteStepRequest)
	if r.GetToken() != "" {
		return nil
	}
	ns := workflow.Namespace(r.GetNamespace())
	if !p.Allows(RoleApprover, ns) {
		return status.Errorf(codes.PermissionDenied, "namespace: %s may not complete steps by name in namespace %q (admin or approver role; or complete with the step's token)", p.Name, ns)
	}
	return nil
}

// clientOrApprover: the client or the approver role of the request's
// namespace (an admin is both).
func clientOrApprover(p *Principal, req any) error {
	ns := requestNamespace(req)
	if !p.Allows(RoleClient, ns) && !p.Allows(RoleApprover, ns) {
		return status.Errorf(codes.PermissionDenied, "namespace: %s may act neither as client nor as approver in namespace %q", p.Name, ns)
	}
	return nil
}

// recoverSteps: the caller must be a supervisor (an admin is one too) in
// the namespace of every decision. The fence itself is checked by the scheduler
// (a request without one is INVALID_ARGUMENT there), in the transaction of
// each change.
func recoverSteps(p *Principal, req any) error {
	for i, d := range req.(*reevev1.RecoverStepsRequest).GetDecisions() {
		ns := workflow.Namespace(d.GetNamespace())
		if !p.Allows(RoleSupervisor, ns) {
			return status.Errorf(codes.PermissionDenied, "decisions[%d].namespace: %s may not recover tasks in namespace %q", i, p.Name, ns)
		}
	}
	return nil
}

// fireSchedules: the caller must be a supervisor (an admin is one too) in
// the namespace of every schedule it fires; the fence is the scheduler's
// to check, in the transaction of each schedule's write.
func fireSchedules(p *Principal, req any) error {
	for i, r := range req.(*reevev1.FireSchedulesRequest).GetSchedules() {
		ns := workflow.Namespace(r.GetNamespace())
		if !p.Allows(RoleSupervisor, ns) {
			return status.Errorf(codes.PermissionDenied, "schedules[%d].namespace: %s may not fire schedules in namespace %q", i, p.Name, ns)
		}
	}
	return nil
}

// agentRegister judges the first message of an agent stream.
func agentRegister(p *Principal, req any) error {
	reg := req.(*reevev1.ConnectRequest).GetRegister()
	if reg == nil {
		return nil // the scheduler refuses a stream that does not start with register
	}
	if why := p.AllowsAgent(workflow.Namespace(reg.GetNamespace()), reg.GetAgentId(), reg.GetStepTypes()); why != "" {
		return status.Error(codes.PermissionDenied, why)
	}
	return nil
}

// authenticate returns the caller: the holder of a bearer token when the
// call carries one, else the subject of a verified client certificate.
func (a *Authorizer) authenticate(ctx context.Context) (*Principal, error) {
	tlsInfo, isTLS := peerTLS(ctx)
	if vals := metadata.ValueFromIncomingContext(ctx, "authorization"); len(vals) > 0 {
		tok, ok := strings.CutPrefix(vals[0], "Bearer ")
		if !ok || len(vals) > 1 {
			return nil, status.Error(codes.Unauthenticated, "authorization: want one \"Bearer <token>\" header")
		}
		if !isTLS {
			return nil, status.Error(codes.Unauthenticated, "authorization: bearer tokens are accepted over TLS only")
		}
		if p := (*a.tokens.Load())[sha256.Sum256([]byte(tok))]; p != nil {
			return p, nil
		}
		return nil, status.Error(codes.Unauthenticated, "authorization: unknown token")
	}
	if a.cfg.Certificates && isTLS && len(tlsInfo.State.VerifiedChains) > 0 {
		leaf := tlsInfo.State.VerifiedChains[0][0]
		if a.cfg.Revoked != nil {
			if err := a.cfg.Revoked(tlsInfo.State.VerifiedChains); err != nil {
				return nil, status.Errorf(codes.Unauthenticated, "client certificate %q: %v", leaf.Subject.CommonName, err)
			}
		}
		p := &Principal{Name: "cert:" + leaf.Subject.CommonName}
		for _, u := range leaf.URIs {
			if u.Scheme != URIScheme {
				continue
			}
			g, err := grantFromURI(u)
			if err != nil {
				return nil, status.Errorf(codes.Unauthenticated, "client certificate %q: %v", leaf.Subject.CommonName, err)
			}
			p.Grants = append(p.Grants, g)
		}
		return p, nil
	}
	return nil, status.Error(codes.Unauthenticated, "no credentials: present a client certificate or a bearer token")
}

func peerTLS(ctx context.Context) (credentials.TLSInfo, bool) {
	pr, ok := peer.FromContext(ctx)
	if !ok || pr.AuthInfo == nil {
		return credentials.TLSInfo{}, false
	}
	info, ok := pr.AuthInfo.(credentials.TLSInfo)
	return info, ok
}

// admit authenticates the caller of method and checks that it holds one of
// the method's roles somewhere; the request itself is judged by rule.check.
func (a *Authorizer) admit(ctx context.Context, method string) (*Principal, rule, error) {
	r, known := rules[method]
	if r.open {
		return nil, r, nil
	}
	p, err := a.authenticate(ctx)
	if err != nil {
		return nil, r, err
	}
	if !known {
		return p, r, status.Errorf(codes.PermissionDenied, "%s: method not allowed", method)
	}
	if !r.any && !p.hasRole(r.roles) {
		return p, r, status.Errorf(codes.PermissionDenied, "%s: %s has none of the roles %s", method, p.Name, fmt.Sprint(r.roles))
	}
	return p, r, nil
}

// refused logs a refused call and returns err.
func (a *Authorizer) refused(ctx context.Context, method string, p *Principal, err error) error {
	if a.cfg.Log == nil {
		return err
	}
	caller, addr := "", ""
	if p != nil {
		caller = p.Name
	}
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		addr = pr.Addr.String()
	}
	st := status.Convert(err)
	a.cfg.Log.Warn("call refused", "method", method, "caller", caller, "peer", addr, "code", st.Code().String(), "reason", st.Message())
	return err
}

// Unary is the unary server interceptor.
func (a *Authorizer) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	p, r, err := a.admit(ctx, info.FullMethod)
	if err != nil {
		return nil, a.refused(ctx, info.FullMethod, p, err)
	}
	if r.check != nil {
		if err := r.check(p, req); err != nil {
			return nil, a.refused(ctx, info.FullMethod, p, err)
		}
	}
	if p != nil {
		ctx = context.WithValue(ctx, principalKey{}, p)
	}
	return handler(ctx, req)
}

// Stream is the stream server interceptor. The stream's first message (the
// request of a server stream, Register on the agent stream) is judged when
// the handler receives it.
func (a *Authorizer) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	p, r, err := a.admit(ss.Context(), info.FullMethod)
	if err != nil {
		return a.refused(ss.Context(), info.FullMethod, p, err)
	}
	if p == nil {
		return handler(srv, ss)
	}
	return handler(srv, &checkedStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), principalKey{}, p), p: p, check: r.check, a: a, method: info.FullMethod})
}

type checkedStream struct {
	grpc.ServerStream
	ctx     context.Context
	p       *Principal
	check   func(*Principal, any) error
	checked bool
	a       *Authorizer
	method  string
}

func (s *checkedStream) Context() context.Context { return s.ctx }

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if !s.checked && s.check != nil {
		s.checked = true
		if err := s.check(s.p, m); err != nil {
			return s.a.refused(s.ctx, s.method, s.p, err)
		}
	}
	return nil
}
