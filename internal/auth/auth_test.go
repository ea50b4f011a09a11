package auth_test

import (
	"context"
	"maps"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/auth"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*serverWatchStream).sendLoop"),
		goleak.IgnoreAnyFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		goleak.IgnoreAnyFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

const wait = 20 * time.Second

const clientToken = "tok-client-a-0123456789"

// secureEnv is a scheduler serving TLS, accepting client certificates of
// one CA (optional: tokens are the alternative) and checking roles.
type secureEnv struct {
	env  *testenv.Env
	s    *testenv.Scheduler
	dir  string
	etcd *clientv3.Client
}

func grants(gs ...string) []*url.URL {
	var out []*url.URL
	for _, g := range gs {
		u, err := url.Parse(g)
		if err != nil {
			panic(err)
		}
		out = append(out, u)
	}
	return out
}

// newSecureEnv starts the scheduler with the auth interceptors, then extra
// server options (interceptors chained after the authorizer's).
func newSecureEnv(t *testing.T, extra ...grpc.ServerOption) *secureEnv {
	t.Helper()
	dir := t.TempDir()
	_, err := tlsconfig.Init(dir, []tlsconfig.CertSpec{
		{Name: "server", Server: true},
		{Name: "admin", URIs: grants("reeve://admin/*")},
		{Name: "supervisor", URIs: grants("reeve://supervisor/*")},
		{Name: "agent-a", URIs: grants("reeve://agent/a?step_types=pay.*,ship&agent_ids=a-*")},
		{Name: "client-a", URIs: grants("reeve://client/a")},
		{Name: "supervisor-a", URIs: grants("reeve://supervisor/a")},
		{Name: "admin-a", URIs: grants("reeve://admin/a")},
		{Name: "approver-a", URIs: grants("reeve://approver/a")},
		{Name: "agent-of-a", URIs: grants("reeve://agent/a")},
		{Name: "nobody"},
	}, tlsconfig.InitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.ParseTokens([]byte(`tokens:
  - name: ci
    token: ` + clientToken + `
    grants: ["reeve://client/a"]
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := tlsconfig.Server(tlsconfig.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem")}, false)
	if err != nil {
		t.Fatal(err)
	}
	a := auth.New(auth.Config{Certificates: true, Tokens: tokens})
	env := testenv.New(t)
	s := env.StartSchedulerGRPC("", append(append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}, a.ServerOptions()...), extra...))
	return &secureEnv{env: env, s: s, dir: dir, etcd: env.Etcd.Client()}
}

// conn dials as the holder of certificate name ("" for none) and token
// ("" for none).
func (e *secureEnv) conn(t *testing.T, name, token string) *grpc.ClientConn {
	t.Helper()
	f := tlsconfig.Files{CA: filepath.Join(e.dir, "ca.pem")}
	if name != "" {
		f.Cert, f.Key = filepath.Join(e.dir, name+".pem"), filepath.Join(e.dir, name+"-key.pem")
	}
	cfg, err := tlsconfig.Client(f, "")
	if err != nil {
		t.Fatal(err)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.Token(token)))
	}
	return testenv.DialWith(t, e.s.Addr, opts...)
}

func inline(ns string) *reevev1.SubmitTaskRequest {
	return &reevev1.SubmitTaskRequest{Namespace: ns, Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{
		Name: "w", Steps: []*reevev1.StepSpec{{Name: "s", Type: "pay.charge", Timeout: durationpb.New(10 * time.Second)}},
	}}}
}

func TestCallsWithoutRightsAreRefusedAndChangeNothing(t *testing.T) {
	e := newSecureEnv(t)
	// A task in namespace a, submitted by its client, for the calls below.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	clientA := reevev1.NewSchedulerServiceClient(e.conn(t, "client-a", ""))
	req := inline("a")
	req.TaskId = "t1"
	if _, err := clientA.SubmitTask(ctx, req); err != nil {
		t.Fatalf("client of namespace a submitting there: %v", err)
	}

	sched := func(name, token string) reevev1.SchedulerServiceClient {
		return reevev1.NewSchedulerServiceClient(e.conn(t, name, token))
	}
	sup := func(name string) reevev1.SupervisorServiceClient {
		return reevev1.NewSupervisorServiceClient(e.conn(t, name, ""))
	}
	fence := &reevev1.Fence{ElectionKey: "/reeve/supervisor/election/x", Revision: 1, SupervisorId: "s"}
	cases := []struct {
		name string
		call func(context.Context) error
		code codes.Code
		msg  string
	}{
		{"no credentials", func(ctx context.Context) error {
			_, err := sched("", "").SubmitTask(ctx, inline("a"))
			return err
		}, codes.Unauthenticated, "no credentials"},
		{"unknown token", func(ctx context.Context) error {
			_, err := sched("", "not-a-token-at-all").SubmitTask(ctx, inline("a"))
			return err
		}, codes.Unauthenticated, "unknown token"},
		{"certificate without grants", func(ctx context.Context) error {
			_, err := sched("nobody", "").GetTask(ctx, &reevev1.GetTaskRequest{Namespace: "a", TaskId: "t1"})
			return err
		}, codes.PermissionDenied, "has none of the roles"},
		{"client submits to another namespace", func(ctx context.Context) error {
			_, err := sched("client-a", "").SubmitTask(ctx, inline("b"))
			return err
		}, codes.PermissionDenied, `namespace "b"`},
		{"client omits the namespace (default)", func(ctx context.Context) error {
			_, err := sched("client-a", "").SubmitTask(ctx, inline(""))
			return err
		}, codes.PermissionDenied, `namespace "default"`},
		{"token client submits to another namespace", func(ctx context.Context) error {
			_, err := sched("", clientToken).SubmitTask(ctx, inline("b"))
			return err
		}, codes.PermissionDenied, `token:ci may not act as client in namespace "b"`},
		{"client lists another namespace", func(ctx context.Context) error {
			_, err := sched("client-a", "").ListTasks(ctx, &reevev1.ListTasksRequest{Namespace: "b"})
			return err
		}, codes.PermissionDenied, "namespace"},
		{"client cancels another namespace's task id", func(ctx context.Context) error {
			_, err := sched("client-a", "").CancelTask(ctx, &reevev1.CancelTaskRequest{Namespace: "b", TaskId: "t1"})
			return err
		}, codes.PermissionDenied, "namespace"},
		{"client watches another namespace", func(ctx context.Context) error {
			st, err := sched("client-a", "").WatchTask(ctx, &reevev1.WatchTaskRequest{Namespace: "b", TaskId: "t1"})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}, codes.PermissionDenied, "namespace"},
		{"client registers a workflow", func(ctx context.Context) error {
			_, err := sched("client-a", "").RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: inline("a").GetInlineWorkflow()})
			return err
		}, codes.PermissionDenied, "has none of the roles"},
		{"client retries a step", func(ctx context.Context) error {
			_, err := sup("client-a").RetryStep(ctx, &reevev1.RetryStepRequest{Namespace: "a", TaskId: "t1", Step: "s"})
			return err
		}, codes.PermissionDenied, "has none of the roles"},
		{"client lists alerts", func(ctx context.Context) error {
			_, err := sup("client-a").ListAlerts(ctx, &reevev1.ListAlertsRequest{Namespace: "a"})
			return err
		}, codes.PermissionDenied, "has none of the roles"},
		{"supervisor acts without a fence", func(ctx context.Context) error {
			_, err := sup("supervisor").FailTask(ctx, &reevev1.FailTaskRequest{Namespace: "a", TaskId: "t1"})
			return err
		}, codes.PermissionDenied, "fence"},
		{"supervisor submits a task", func(ctx context.Context) error {
			_, err := sched("supervisor", "").SubmitTask(ctx, inline("a"))
			return err
		}, codes.PermissionDenied, "has none of the roles"},
		{"agent submits a task", func(ctx context.Context) error {
			_, err := sched("agent-a", "").SubmitTask(ctx, inline("a"))
			return err
		}, codes.PermissionDenied, "has none of the roles"},
		{"agent registers an unallowed step type", func(ctx context.Context) error {
			_, err := testenv.TryConnectRawOn(t, e.conn(t, "agent-a", ""), &reevev1.Register{Namespace: "a", AgentId: "a-1", StepTypes: []string{"pay.charge", "refund"}, MaxConcurrentSteps: 1})
			return err
		}, codes.PermissionDenied, "register.step_types[1]"},
		{"agent registers in another namespace", func(ctx context.Context) error {
			_, err := testenv.TryConnectRawOn(t, e.conn(t, "agent-a", ""), &reevev1.Register{Namespace: "b", AgentId: "a-1", StepTypes: []string{"pay.charge"}, MaxConcurrentSteps: 1})
			return err
		}, codes.PermissionDenied, `namespace "b"`},
		{"agent takes another agent id", func(ctx context.Context) error {
			_, err := testenv.TryConnectRawOn(t, e.conn(t, "agent-a", ""), &reevev1.Register{Namespace: "a", AgentId: "b-1", StepTypes: []string{"pay.charge"}, MaxConcurrentSteps: 1})
			return err
		}, codes.PermissionDenied, "register.agent_id"},
		{"client connects as an agent", func(ctx context.Context) error {
			_, err := testenv.TryConnectRawOn(t, e.conn(t, "client-a", ""), &reevev1.Register{Namespace: "a", AgentId: "a-1", StepTypes: []string{"pay.charge"}, MaxConcurrentSteps: 1})
			return err
		}, codes.PermissionDenied, "has none of the roles"},
		{"admin fails a task with a forged fence", func(ctx context.Context) error {
			_, err := sup("admin").FailTask(ctx, &reevev1.FailTaskRequest{Namespace: "a", TaskId: "t1", Step: "s", Attempt: 1, Fence: fence})
			return err
		}, codes.FailedPrecondition, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			before := testenv.DataKeys(t, e.etcd)
			err := tc.call(ctx)
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.msg) {
				t.Fatalf("got %v, want %v with a message containing %q", err, tc.code, tc.msg)
			}
			if after := testenv.DataKeys(t, e.etcd); !maps.Equal(before, after) {
				t.Fatalf("etcd data changed from %v to %v: the refused call wrote something", before, after)
			}
		})
	}
}

func TestAllowedCallsSucceed(t *testing.T) {
	e := newSecureEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for _, who := range []struct{ name, token string }{{"client-a", ""}, {"", clientToken}, {"admin", ""}} {
		if _, err := reevev1.NewSchedulerServiceClient(e.conn(t, who.name, who.token)).SubmitTask(ctx, inline("a")); err != nil {
			t.Fatalf("%s%s submitting in namespace a: %v", who.name, who.token, err)
		}
	}
	// The history records who canceled.
	req := inline("a")
	req.TaskId = "to-cancel"
	clientA := reevev1.NewSchedulerServiceClient(e.conn(t, "client-a", ""))
	if _, err := clientA.SubmitTask(ctx, req); err != nil {
		t.Fatal(err)
	}
	canceled, err := clientA.CancelTask(ctx, &reevev1.CancelTaskRequest{Namespace: "a", TaskId: "to-cancel"})
	if err != nil {
		t.Fatal(err)
	}
	if h := canceled.GetTask().GetHistory(); h[len(h)-1].GetActor() != "client/cert:client-a" {
		t.Fatalf("cancel recorded as %q, want client/cert:client-a", h[len(h)-1].GetActor())
	}
	// An operator's action records the operator's identity.
	req.TaskId = "to-fail"
	if _, err := clientA.SubmitTask(ctx, req); err != nil {
		t.Fatal(err)
	}
	failed, err := reevev1.NewSupervisorServiceClient(e.conn(t, "admin", "")).FailTask(ctx, &reevev1.FailTaskRequest{Namespace: "a", TaskId: "to-fail"})
	if err != nil {
		t.Fatal(err)
	}
	if h := failed.GetTask().GetHistory(); h[len(h)-1].GetActor() != "operator/cert:admin" {
		t.Fatalf("operator fail recorded as %q, want operator/cert:admin", h[len(h)-1].GetActor())
	}
	wf := inline("a").GetInlineWorkflow()
	wf.Namespace = "a"
	if _, err := reevev1.NewSchedulerServiceClient(e.conn(t, "admin", "")).RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: wf}); err != nil {
		t.Fatalf("admin registering a workflow: %v", err)
	}
	if _, err := reevev1.NewSupervisorServiceClient(e.conn(t, "admin", "")).ListAlerts(ctx, &reevev1.ListAlertsRequest{Namespace: "zzz"}); err != nil {
		t.Fatalf("admin listing alerts: %v", err)
	}
	// The agent of namespace a gets the namespace's steps, one at a time, and
	// completes them.
	agent := testenv.ConnectRawOn(t, e.conn(t, "agent-a", ""), &reevev1.Register{Namespace: "a", AgentId: "a-1", StepTypes: []string{"pay.charge", "ship"}, MaxConcurrentSteps: 1})
	for range 3 {
		as := agent.NextAssignment(wait)
		if ack := agent.Succeed(as.GetRef(), nil); !ack.GetAccepted() {
			t.Fatalf("result refused: %v", ack)
		}
	}
}

func TestCertificateOfAnotherCAIsRefused(t *testing.T) {
	e := newSecureEnv(t)
	other := t.TempDir()
	if _, err := tlsconfig.Init(other, []tlsconfig.CertSpec{{Name: "admin", URIs: grants("reeve://admin/*")}}, tlsconfig.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := tlsconfig.Client(tlsconfig.Files{CA: filepath.Join(e.dir, "ca.pem"), Cert: filepath.Join(other, "admin.pem"), Key: filepath.Join(other, "admin-key.pem")}, "")
	if err != nil {
		t.Fatal(err)
	}
	c := reevev1.NewSchedulerServiceClient(testenv.DialWith(t, e.s.Addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg))))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	before := testenv.DataKeys(t, e.etcd)
	if _, err := c.SubmitTask(ctx, inline("a")); status.Code(err) != codes.Unavailable {
		t.Fatalf("self-made admin certificate: %v, want the TLS handshake refused", err)
	}
	if after := testenv.DataKeys(t, e.etcd); !maps.Equal(before, after) {
		t.Fatalf("etcd changed")
	}
}
