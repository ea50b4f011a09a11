package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/cluster"
	"github.com/reeve-org/reeve/internal/cluster/clustertest"
)

// unavailableBound is how long a request may take to fail while etcd has
// no quorum: the store's 5 s request timeout plus a margin for a loaded,
// shared 2-core machine under -race.
const unavailableBound = 5*time.Second + 3*time.Second

// A real cluster of separate processes (3 etcd members, 2 schedulers, 2
// supervisors, 2 demo agents) loses etcd's quorum: the leader and one
// follower are SIGKILLed for about 10 s. Clients get UNAVAILABLE within the
// bound from both schedulers, and nothing else; no reeve process exits.
// The two members are started again and, without touching any reeve
// process, new tasks succeed, and every task submitted before the outage
// (including demo.timeout steps whose attempt was running and expired during
// it, which the supervisor must retry), or during it and retried with the
// same task_id, succeeds.
func TestQuorumLossGivesUnavailableAndResumes(t *testing.T) {
	reeve, etcd := clustertest.Reeve(t), clustertest.Tool(t, "etcd")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c := clustertest.Start(ctx, t, cluster.Config{Dir: dir, Reeve: reeve, Etcd: etcd, NoFsync: true,
		Supervisors: 2, Agents: 2, SessionTTL: 5, AgentArgs: func(int) []string { return []string{"--demo"} }})
	reeveProcs := append(append(append([]*cluster.Process(nil), c.Schedulers...), c.Supervisors...), c.Agents...)
	allAlive := func(when string) {
		t.Helper()
		for _, p := range reeveProcs {
			if !p.Running() {
				t.Fatalf("%s: %s exited", when, p.Name)
			}
		}
	}
	clients := []reevev1.SchedulerServiceClient{schedulerClient(t, c.SchedulerAddrs[0]), schedulerClient(t, c.SchedulerAddrs[1])}

	// The agents register the demo workflows through a scheduler.
	for {
		_, err := clients[0].GetWorkflow(ctx, &reevev1.GetWorkflowRequest{Name: "demo.orders"})
		if err == nil {
			break
		}
		if status.Code(err) != codes.NotFound || ctx.Err() != nil {
			t.Fatalf("demo.orders never registered: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	runTasks(ctx, t, clients[0], "before-a", 3)
	runTasks(ctx, t, clients[1], "before-b", 3)

	// Tasks in flight when quorum goes: submitted, not waited for.
	var inflight []string
	for i := range 6 {
		id := fmt.Sprintf("inflight-%d", i)
		if _, err := clients[i%2].SubmitTask(ctx, demoOrder(id)); err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
		inflight = append(inflight, id)
	}

	// demo.timeout: the first attempt never answers. Once it runs, its
	// complete-by (2 s) passes during the outage, and only the supervisor
	// can move it on (retry), after quorum returns.
	for i := range 2 {
		id := fmt.Sprintf("inflight-timeout-%d", i)
		req := demoOrder(id)
		req.Workflow = &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "demo.timeout"}}
		if _, err := clients[i%2].SubmitTask(ctx, req); err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
		inflight = append(inflight, id)
		waitState(ctx, t, clients[0], id, reevev1.TaskState_TASK_STATE_RUNNING)
	}
	open := 0
	for _, id := range inflight {
		resp, err := clients[0].GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		if st := resp.GetTask().GetState(); st != reevev1.TaskState_TASK_STATE_SUCCEEDED {
			open++
		}
	}
	t.Logf("%d of %d tasks submitted just before the outage not yet SUCCEEDED at its start", open, len(inflight))

	// Kill the etcd leader and one follower: the survivor is a follower.
	leader := etcdLeader(ctx, t, c)
	victims := []*cluster.Process{c.Etcd[leader], c.Etcd[(leader+1)%3]}
	lost := time.Now()
	for _, m := range victims {
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("killed %s (leader) and %s at %s", victims[0].Name, victims[1].Name, lost.Format(time.RFC3339Nano))

	// (a) Every request through either scheduler fails with UNAVAILABLE
	// within the bound. Two rounds: at once, and after the supervisors'
	// sessions (TTL 5 s) have lapsed.
	var during []string // submitted during the outage; may or may not exist
	var slowest time.Duration
	for round := range 2 {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i, cl := range clients {
			id := fmt.Sprintf("during-%d-%d", round, i)
			during = append(during, id)
			probes := map[string]func(context.Context) error{
				"SubmitTask": func(ctx context.Context) error { _, err := cl.SubmitTask(ctx, demoOrder(id)); return err },
				"GetTask": func(ctx context.Context) error {
					_, err := cl.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "before-a-0"})
					return err
				},
			}
			for name, probe := range probes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
					defer pcancel()
					start := time.Now()
					err := probe(pctx)
					took := time.Since(start)
					mu.Lock()
					defer mu.Unlock()
					if took > slowest {
						slowest = took
					}
					if code := status.Code(err); code != codes.Unavailable {
						t.Errorf("round %d: %s via scheduler-%d: got %v (%v) after %v, want UNAVAILABLE", round, name, i+1, code, err, took)
					} else if took > unavailableBound {
						t.Errorf("round %d: %s via scheduler-%d: UNAVAILABLE after %v, want within %v", round, name, i+1, took, unavailableBound)
					} else {
						t.Logf("round %d: %s via scheduler-%d: UNAVAILABLE after %v", round, name, i+1, took.Round(10*time.Millisecond))
					}
				}()
			}
		}
		wg.Wait()
		// (b) No reeve process exited.
		allAlive(fmt.Sprintf("during outage, round %d", round))
		if round == 0 {
			// Health follows etcd (docs/observability.md): NOT_SERVING
			// within its 1 s check interval, the process still up.
			for _, addr := range c.SchedulerAddrs {
				waitHealth(ctx, t, addr, healthpb.HealthCheckResponse_NOT_SERVING)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	outage := time.Since(lost)

	// (c) Quorum returns; no reeve process is touched.
	back := time.Now()
	for _, m := range victims {
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("outage lasted %v; slowest UNAVAILABLE %v", outage.Round(10*time.Millisecond), slowest.Round(10*time.Millisecond))

	// The first submission accepted after quorum returns, through each
	// scheduler; retried with the same task_id (idempotent).
	firstOK := make([]time.Duration, len(clients))
	for i, cl := range clients {
		id := fmt.Sprintf("after-first-%d", i)
		for {
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := cl.SubmitTask(pctx, demoOrder(id))
			pcancel()
			if err == nil {
				break
			}
			if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
				t.Fatalf("submit %s via scheduler-%d after quorum returned: %v", id, i+1, err)
			}
			if ctx.Err() != nil {
				t.Fatalf("submit %s via scheduler-%d: never accepted after quorum returned: %v", id, i+1, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		firstOK[i] = time.Since(back)
	}
	for i, cl := range clients {
		waitTerminal(ctx, t, cl, fmt.Sprintf("after-first-%d", i), true)
	}
	resumed := time.Since(back)
	for _, addr := range c.SchedulerAddrs {
		waitHealth(ctx, t, addr, healthpb.HealthCheckResponse_SERVING)
	}
	allAlive("after quorum returned")
	t.Logf("first submission accepted %v (scheduler-1) and %v (scheduler-2) after the members were started; both tasks SUCCEEDED %v after",
		firstOK[0].Round(10*time.Millisecond), firstOK[1].Round(10*time.Millisecond), resumed.Round(10*time.Millisecond))

	// Tasks in flight before the outage end.
	for _, id := range inflight {
		waitTerminal(ctx, t, clients[0], id, true)
	}
	t.Logf("tasks submitted before the outage SUCCEEDED %v after the members were started", time.Since(back).Round(10*time.Millisecond))
	// The demo.timeout attempts that were running when quorum went were
	// retried by the supervisor: they succeeded on attempt 2.
	for _, id := range inflight[len(inflight)-2:] {
		resp, err := clients[0].GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		if a := resp.GetTask().GetSteps()[0].GetAttempt(); a != 2 {
			t.Errorf("%s: step succeeded on attempt %d, want 2 (retried once by the supervisor)", id, a)
		}
	}
	// A submission refused with UNAVAILABLE may still have been committed
	// (etcd may commit a proposal after the client gave up). Retrying it
	// with the same task_id is what the docs tell clients to do: it is
	// accepted (or already exists) and the task ends.
	for _, id := range during {
		_, err := clients[1].SubmitTask(ctx, demoOrder(id))
		switch status.Code(err) {
		case codes.OK:
		case codes.AlreadyExists:
			t.Logf("%s, refused during the outage, was committed when quorum returned", id)
		default:
			t.Fatalf("resubmit %s: %v", id, err)
		}
		waitTerminal(ctx, t, clients[1], id, true)
	}
	runTasks(ctx, t, clients[0], "after-a", 3)
	runTasks(ctx, t, clients[1], "after-b", 3)
	allAlive("at the end")
	t.Logf("all tasks ended %v after the members were started", time.Since(back).Round(10*time.Millisecond))
	vcli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer vcli.Close()
	clustertest.Verify(ctx, t, vcli)
}

func demoOrder(id string) *reevev1.SubmitTaskRequest {
	in, _ := structpb.NewValue(map[string]any{"order_id": id})
	return &reevev1.SubmitTaskRequest{TaskId: id, Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "demo.orders"}}, Input: in}
}

// waitTerminal polls the task until it is terminal (SUCCEEDED when
// mustSucceed) or ctx ends.
func waitTerminal(ctx context.Context, t *testing.T, c reevev1.SchedulerServiceClient, id string, mustSucceed bool) {
	t.Helper()
	var last string
	for ctx.Err() == nil {
		resp, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
		if err != nil {
			last = err.Error()
			if code := status.Code(err); code != codes.Unavailable {
				t.Fatalf("get %s: %v", id, err)
			}
		} else {
			st := resp.GetTask().GetState()
			last = st.String()
			switch st {
			case reevev1.TaskState_TASK_STATE_PENDING, reevev1.TaskState_TASK_STATE_RUNNING, reevev1.TaskState_TASK_STATE_COMPENSATING:
			default:
				if mustSucceed && st != reevev1.TaskState_TASK_STATE_SUCCEEDED {
					t.Fatalf("task %s ended %v: %s", id, st, resp.GetTask().GetReason())
				}
				if st != reevev1.TaskState_TASK_STATE_SUCCEEDED {
					t.Logf("task %s ended %v: %s", id, st, resp.GetTask().GetReason())
				}
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("task %s not terminal in time; last %s", id, last)
}

// waitState polls the task until it is in state want or ctx ends.
func waitState(ctx context.Context, t *testing.T, c reevev1.SchedulerServiceClient, id string, want reevev1.TaskState) {
	t.Helper()
	var last reevev1.TaskState
	for ctx.Err() == nil {
		resp, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		if last = resp.GetTask().GetState(); last == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("task %s never %v; last %v", id, want, last)
}

// etcdLeader returns the index in c.Etcd of the etcd leader.
func etcdLeader(ctx context.Context, t *testing.T, c *cluster.Cluster) int {
	t.Helper()
	for i, ep := range c.EtcdEndpoints {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := cli.Status(ctx, ep)
		cli.Close()
		if err != nil {
			t.Fatalf("status of %s: %v", ep, err)
		}
		if resp.Header.GetMemberId() == resp.Leader {
			return i
		}
	}
	t.Fatal("no etcd member is the leader")
	return -1
}

// waitHealth polls the scheduler's overall health until it is want, for at
// most 5 s (the health check runs every second).
func waitHealth(ctx context.Context, t *testing.T, addr string, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var last string
	for ctx.Err() == nil {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil && resp.GetStatus() == want {
			return
		}
		last = fmt.Sprint(resp.GetStatus(), " ", err)
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("health of %s never %v; last %s", addr, want, last)
}
