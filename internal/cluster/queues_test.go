package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/cluster"
	"github.com/reeve-org/reeve/internal/cluster/clustertest"
	"github.com/reeve-org/reeve/internal/demo"
)

// Flow control in production's configuration (issue 36): 3 etcd members, 2
// schedulers, a supervisor and 3 demo agents, all over mutual TLS with role
// checks. Only the admin may set a limit; the limit on payments.charge
// holds across both schedulers while demo orders run through them, and
// `reeve verify` finds no limit_exceeded in the attempt history.
func TestQueueLimitsWithTwoSchedulersOverMTLS(t *testing.T) {
	const limit = 2
	reeve, etcd := clustertest.Reeve(t), clustertest.Tool(t, "etcd")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := clustertest.Start(ctx, t, cluster.Config{Dir: t.TempDir(), Reeve: reeve, Etcd: etcd, NoFsync: true, Secure: true,
		Supervisors: 1, Agents: 3, AgentArgs: func(int) []string { return []string{"--demo"} }, Workflows: demo.Workflows()})
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	dial := func(id cluster.Identity, addr string) *grpc.ClientConn {
		opts, err := c.DialOptions(id)
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	req := &reevev1.SetQueueLimitRequest{Type: "payments.charge", MaxRunning: limit}
	if _, err := reevev1.NewQueueServiceClient(dial(cluster.Client, c.SchedulerAddrs[0])).SetQueueLimit(ctx, req); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a client set a limit: %v; want PERMISSION_DENIED", err)
	}
	admin := reevev1.NewQueueServiceClient(dial(cluster.Admin, c.SchedulerAddrs[0]))
	for {
		if _, err = admin.SetQueueLimit(ctx, req); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("admin sets the limit: %v", err)
	}
	// Both schedulers apply it (their dispatchers count the type's slots).
	for _, addr := range c.SchedulerAddrs {
		q := reevev1.NewQueueServiceClient(dial(cluster.Client, addr))
		for applied := false; !applied; time.Sleep(50 * time.Millisecond) {
			resp, err := q.ListQueues(ctx, &reevev1.ListQueuesRequest{})
			if err != nil {
				t.Fatalf("list queues on %s: %v", addr, err)
			}
			for _, qu := range resp.GetQueues() {
				applied = applied || (qu.GetType() == "payments.charge" && qu.GetRunningCounted())
			}
		}
	}

	// The slots held, as etcd has them, at every revision.
	var (
		mu   sync.Mutex
		held = map[string]bool{}
		most int
	)
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for wr := range cli.Watch(wctx, "/reeve/slots/default/payments.charge/", clientv3.WithPrefix()) {
			mu.Lock()
			for i, e := range wr.Events {
				if e.Type == mvccpb.DELETE {
					delete(held, string(e.Kv.Key))
				} else {
					held[string(e.Kv.Key)] = true
				}
				if i == len(wr.Events)-1 || wr.Events[i+1].Kv.ModRevision != e.Kv.ModRevision {
					most = max(most, len(held))
				}
			}
			mu.Unlock()
		}
	}()

	// Orders through both schedulers.
	const n = 20
	var ids []string
	for i := range n {
		sc := reevev1.NewSchedulerServiceClient(dial(cluster.Client, c.SchedulerAddrs[i%2]))
		id := fmt.Sprintf("limited-%d", i)
		in, _ := structpb.NewValue(map[string]any{"order_id": id})
		if _, err := sc.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: id, Input: in,
			Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "demo.orders"}}}); err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
		ids = append(ids, id)
	}
	sc := reevev1.NewSchedulerServiceClient(dial(cluster.Client, c.SchedulerAddrs[0]))
	for _, id := range ids {
		for {
			resp, err := sc.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
			if err != nil {
				t.Fatalf("get %s: %v", id, err)
			}
			st := resp.GetTask().GetState()
			if st == reevev1.TaskState_TASK_STATE_SUCCEEDED || st == reevev1.TaskState_TASK_STATE_COMPENSATED || st == reevev1.TaskState_TASK_STATE_FAILED {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	stopWatch()
	<-watched
	mu.Lock()
	defer mu.Unlock()
	if most > limit {
		t.Errorf("%d payments.charge attempts held slots at once; the limit is %d", most, limit)
	}
	t.Logf("at most %d payments.charge slots held at once (limit %d)", most, limit)
	clustertest.Verify(ctx, t, cli)
}
