package auth_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/auth"
)

// grantedTo is the contract of docs/security.md: which roles may call each
// method of Reeve's API in the namespace of their grant. Every method of
// every reeve.v1 service must be listed (TestEveryRoleCallsExactlyWhatItIsGranted
// fails otherwise): adding an RPC means deciding who may call it.
var grantedTo = map[string][]auth.Role{
	reevev1.SchedulerService_SubmitTask_FullMethodName:       {auth.RoleClient, auth.RoleAdmin},
	reevev1.SchedulerService_GetTask_FullMethodName:          {auth.RoleClient, auth.RoleAdmin},
	reevev1.SchedulerService_ListTasks_FullMethodName:        {auth.RoleClient, auth.RoleAdmin},
	reevev1.SchedulerService_CountTasks_FullMethodName:       {auth.RoleClient, auth.RoleAdmin},
	reevev1.SchedulerService_WatchTasks_FullMethodName:       {auth.RoleClient, auth.RoleAdmin},
	reevev1.SchedulerService_WatchTask_FullMethodName:        {auth.RoleClient, auth.RoleAdmin},
	reevev1.SchedulerService_CancelTask_FullMethodName:       {auth.RoleClient, auth.RoleAdmin},
	reevev1.SchedulerService_RegisterWorkflow_FullMethodName: {auth.RoleAdmin},
	reevev1.SchedulerService_RerunTask_FullMethodName:        {auth.RoleAdmin},
	reevev1.SchedulerService_GetWorkflow_FullMethodName:      {auth.RoleClient, auth.RoleAdmin},
	reevev1.SchedulerService_ListWorkflows_FullMethodName:    {auth.RoleClient, auth.RoleAdmin},
	reevev1.SchedulerService_ListAgents_FullMethodName:       {auth.RoleClient, auth.RoleAdmin},
	// By name; by token any authenticated caller (TestCompleteStepByToken).
	reevev1.SchedulerService_CompleteStep_FullMethodName:       {auth.RoleApprover, auth.RoleAdmin},
	reevev1.SchedulerService_GetCompletionToken_FullMethodName: {auth.RoleApprover, auth.RoleAdmin},
	reevev1.SchedulerService_ListWaitingSteps_FullMethodName:   {auth.RoleClient, auth.RoleApprover, auth.RoleAdmin},
	// The recovery calls below carry a fence (a supervisor's form).
	reevev1.SupervisorService_RetryStep_FullMethodName:      {auth.RoleSupervisor, auth.RoleAdmin},
	reevev1.SupervisorService_CompensateTask_FullMethodName: {auth.RoleSupervisor, auth.RoleAdmin},
	reevev1.SupervisorService_FailTask_FullMethodName:       {auth.RoleSupervisor, auth.RoleAdmin},
	reevev1.SupervisorService_RecoverSteps_FullMethodName:   {auth.RoleSupervisor, auth.RoleAdmin},
	reevev1.SupervisorService_PauseTask_FullMethodName:      {auth.RoleAdmin},
	reevev1.BatchService_StartBatch_FullMethodName:          {auth.RoleAdmin},
	reevev1.BatchService_GetBatch_FullMethodName:            {auth.RoleAdmin},
	reevev1.BatchService_ListBatches_FullMethodName:         {auth.RoleAdmin},
	reevev1.BatchService_CancelBatch_FullMethodName:         {auth.RoleAdmin},
	reevev1.SupervisorService_ResumeTask_FullMethodName:     {auth.RoleAdmin},
	reevev1.SupervisorService_ListAlerts_FullMethodName:     {auth.RoleAdmin},
	reevev1.SupervisorService_WatchAlerts_FullMethodName:    {auth.RoleAdmin},
	reevev1.SupervisorService_AckAlert_FullMethodName:       {auth.RoleAdmin},
	reevev1.SupervisorService_FireSchedules_FullMethodName:  {auth.RoleSupervisor, auth.RoleAdmin},
	reevev1.AgentService_Connect_FullMethodName:             {auth.RoleAgent},
	// Schedules: changed by the namespace's admin, read by its clients.
	reevev1.ScheduleService_CreateSchedule_FullMethodName:   {auth.RoleAdmin},
	reevev1.ScheduleService_UpdateSchedule_FullMethodName:   {auth.RoleAdmin},
	reevev1.ScheduleService_PauseSchedule_FullMethodName:    {auth.RoleAdmin},
	reevev1.ScheduleService_ResumeSchedule_FullMethodName:   {auth.RoleAdmin},
	reevev1.ScheduleService_TriggerSchedule_FullMethodName:  {auth.RoleAdmin},
	reevev1.ScheduleService_BackfillSchedule_FullMethodName: {auth.RoleAdmin},
	reevev1.ScheduleService_DeleteSchedule_FullMethodName:   {auth.RoleAdmin},
	reevev1.ScheduleService_GetSchedule_FullMethodName:      {auth.RoleClient, auth.RoleAdmin},
	reevev1.ScheduleService_ListSchedules_FullMethodName:    {auth.RoleClient, auth.RoleAdmin},
	// Queues (flow control): limits and pauses set by the namespace's
	// admin, listed by its clients.
	reevev1.QueueService_SetQueueLimit_FullMethodName: {auth.RoleAdmin},
	reevev1.QueueService_PauseQueue_FullMethodName:    {auth.RoleAdmin},
	reevev1.QueueService_ResumeQueue_FullMethodName:   {auth.RoleAdmin},
	reevev1.QueueService_ListQueues_FullMethodName:    {auth.RoleClient, auth.RoleAdmin},
}

// admitted records the calls that passed the authorizer and reached their
// handler, by the x-call-id each test call sends. For a stream, admitted
// means its first message passed the authorizer's check.
type admitted struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (a *admitted) mark(ctx context.Context) {
	id := metadata.ValueFromIncomingContext(ctx, "x-call-id")
	if len(id) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids[id[0]] = true
}

func (a *admitted) has(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids[id]
}

func (a *admitted) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			a.mark(ctx)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, &admittedStream{ServerStream: ss, a: a})
		}),
	}
}

type admittedStream struct {
	grpc.ServerStream
	a *admitted
}

func (s *admittedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m) // the authorizer's check runs in here
	if err == nil {
		s.a.mark(s.Context())
	}
	return err
}

// reeveMethods returns every method of every service of package reeve.v1,
// from the generated descriptors.
func reeveMethods(t *testing.T) []protoreflect.MethodDescriptor {
	t.Helper()
	var out []protoreflect.MethodDescriptor
	protoregistry.GlobalFiles.RangeFilesByPackage("reeve.v1", func(f protoreflect.FileDescriptor) bool {
		for i := range f.Services().Len() {
			svc := f.Services().Get(i)
			for j := range svc.Methods().Len() {
				out = append(out, svc.Methods().Get(j))
			}
		}
		return true
	})
	if len(out) == 0 {
		t.Fatal("no reeve.v1 service descriptors registered")
	}
	return out
}

func fullMethod(m protoreflect.MethodDescriptor) string {
	return fmt.Sprintf("/%s/%s", m.Parent().FullName(), m.Name())
}

// requestFor returns the first request message of method m acting in
// namespace ns: every namespace field set, the recovery calls with a fence.
func requestFor(t *testing.T, m protoreflect.MethodDescriptor, ns string) proto.Message {
	t.Helper()
	mt, err := protoregistry.GlobalTypes.FindMessageByName(m.Input().FullName())
	if err != nil {
		t.Fatal(err)
	}
	req := mt.New().Interface()
	fence := &reevev1.Fence{ElectionKey: "/reeve/supervisor/election/forged", Revision: 1, SupervisorId: "s"}
	switch r := req.(type) {
	case *reevev1.RegisterWorkflowRequest:
		r.Workflow = &reevev1.Workflow{Namespace: ns, Name: "w", Steps: []*reevev1.StepSpec{{Name: "s", Type: "pay.charge", Timeout: durationpb.New(10 * time.Second)}}}
	case *reevev1.ConnectRequest:
		r.Msg = &reevev1.ConnectRequest_Register{Register: &reevev1.Register{Namespace: ns, AgentId: "a-1", StepTypes: []string{"pay.charge"}, MaxConcurrentSteps: 1}}
	case *reevev1.CreateScheduleRequest:
		r.Schedule = &reevev1.Schedule{Namespace: ns, Name: "s"}
	case *reevev1.UpdateScheduleRequest:
		r.Schedule = &reevev1.Schedule{Namespace: ns, Name: "s"}
	case *reevev1.FireSchedulesRequest:
		r.Schedules = []*reevev1.ScheduleRef{{Namespace: ns, Name: "s"}}
	case *reevev1.RecoverStepsRequest:
		r.Decisions = []*reevev1.RecoveryDecision{{Namespace: ns, TaskId: "t1", Step: "s", Attempt: 1, Action: reevev1.RecoveryAction_RECOVERY_ACTION_RETRY}}
	}
	fields := req.ProtoReflect().Descriptor().Fields()
	if f := fields.ByName("namespace"); f != nil {
		req.ProtoReflect().Set(f, protoreflect.ValueOfString(ns))
	}
	if f := fields.ByName("fence"); f != nil {
		req.ProtoReflect().Set(f, protoreflect.ValueOfMessage(fence.ProtoReflect()))
	}
	return req
}

// call makes one call of m as conn's holder and reports whether the
// authorizer let it through; a refusal must be PERMISSION_DENIED.
func call(t *testing.T, cc *grpc.ClientConn, seen *admitted, m protoreflect.MethodDescriptor, ns, id string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-call-id", id), wait)
	defer cancel()
	req := requestFor(t, m, ns)
	mt, err := protoregistry.GlobalTypes.FindMessageByName(m.Output().FullName())
	if err != nil {
		t.Fatal(err)
	}
	resp := mt.New().Interface()
	if !m.IsStreamingClient() && !m.IsStreamingServer() {
		err := cc.Invoke(ctx, fullMethod(m), req, resp)
		if seen.has(id) {
			return true
		}
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s in namespace %q: refused with %v, want PERMISSION_DENIED", fullMethod(m), ns, err)
		}
		return false
	}
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: m.IsStreamingServer(), ClientStreams: m.IsStreamingClient()}, fullMethod(m))
	if err != nil {
		t.Fatalf("%s: open stream: %v", fullMethod(m), err)
	}
	// io.EOF: the stream already ended (refused); RecvMsg gives the status.
	if err := st.SendMsg(req); err != nil && err != io.EOF {
		t.Fatalf("%s: send: %v", fullMethod(m), err)
	}
	if !m.IsStreamingClient() {
		_ = st.CloseSend()
	}
	ended := make(chan error, 1)
	go func() {
		for {
			if err := st.RecvMsg(resp); err != nil {
				ended <- err
				return
			}
		}
	}()
	// The stream is admitted (its handler received the request) or ends
	// refused; an admitted stream may serve for as long as it likes.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if seen.has(id) {
			cancel()
			<-ended
			return true
		}
		select {
		case err := <-ended:
			if seen.has(id) {
				return true
			}
			if status.Code(err) != codes.PermissionDenied {
				t.Errorf("%s in namespace %q: ended with %v, want PERMISSION_DENIED", fullMethod(m), ns, err)
			}
			return false
		case <-tick.C:
		}
	}
}

// TestEveryRoleCallsExactlyWhatItIsGranted calls every method of the API, as
// read from the generated descriptors, as each role of namespace a and as a
// certificate without grants, over mutual TLS, in namespace a and in b: a
// role reaches the handler exactly where grantedTo says, and is
// PERMISSION_DENIED everywhere else.
func TestEveryRoleCallsExactlyWhatItIsGranted(t *testing.T) {
	seen := &admitted{ids: map[string]bool{}}
	e := newSecureEnv(t, seen.serverOptions()...)
	holders := []struct {
		cert string
		role auth.Role // "" for no grant
	}{
		{"client-a", auth.RoleClient},
		{"agent-of-a", auth.RoleAgent},
		{"supervisor-a", auth.RoleSupervisor},
		{"admin-a", auth.RoleAdmin},
		{"approver-a", auth.RoleApprover},
		{"nobody", ""},
	}
	conns := map[string]*grpc.ClientConn{}
	for _, h := range holders {
		conns[h.cert] = e.conn(t, h.cert, "")
	}
	n := 0
	for _, m := range reeveMethods(t) {
		roles, ok := grantedTo[fullMethod(m)]
		if !ok {
			t.Errorf("%s has no entry in grantedTo: decide who may call it (internal/auth rules, docs/security.md)", fullMethod(m))
			continue
		}
		for _, h := range holders {
			for _, ns := range []string{"a", "b"} {
				n++
				want := ns == "a" && slices.Contains(roles, h.role)
				if got := call(t, conns[h.cert], seen, m, ns, fmt.Sprint(n)); got != want {
					t.Errorf("%s as %s in namespace %q: admitted %v, want %v", fullMethod(m), h.cert, ns, got, want)
				}
			}
		}
	}
	t.Logf("%d calls", n)
}
