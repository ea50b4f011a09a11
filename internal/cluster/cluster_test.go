package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/cluster"
	"github.com/reeve-org/reeve/internal/cluster/clustertest"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
)

// A real cluster of separate processes: 3 etcd members, 2 schedulers, a
// supervisor and 3 demo agents. Killing the scheduler that holds agents
// moves them to the other one, and tasks still complete.
func TestKilledSchedulerMovesItsAgents(t *testing.T) {
	reeve, etcd := clustertest.Reeve(t), clustertest.Tool(t, "etcd")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c := clustertest.Start(ctx, t, cluster.Config{Dir: dir, Reeve: reeve, Etcd: etcd, NoFsync: true,
		Supervisors: 1, Agents: 3, AgentArgs: func(int) []string { return []string{"--demo"} }})
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	placement := waitAgents(ctx, t, cli, func(m map[string]string) bool { return len(m) == 3 })
	t.Logf("agents before: %v", placement)
	perScheduler := map[string]int{}
	for _, s := range placement {
		perScheduler[s]++
	}
	victim, survivor := 0, 1
	if perScheduler["scheduler-2"] > perScheduler["scheduler-1"] {
		victim, survivor = 1, 0
	}
	survivorID := fmt.Sprintf("scheduler-%d", survivor+1)

	client := schedulerClient(t, c.SchedulerAddrs[survivor])
	runTasks(ctx, t, client, "before", 5)
	if err := c.Schedulers[victim].Kill(); err != nil {
		t.Fatal(err)
	}
	after := waitAgents(ctx, t, cli, func(m map[string]string) bool {
		if len(m) != 3 {
			return false
		}
		for _, s := range m {
			if s != survivorID {
				return false
			}
		}
		return true
	})
	t.Logf("agents after killing scheduler-%d: %v", victim+1, after)
	runTasks(ctx, t, client, "after", 10)
	clustertest.Verify(ctx, t, cli)
}

// waitAgents polls the agent records until ok accepts the agent → scheduler map.
func waitAgents(ctx context.Context, t *testing.T, cli *clientv3.Client, ok func(map[string]string) bool) map[string]string {
	t.Helper()
	var last map[string]string
	for ctx.Err() == nil {
		resp, err := cli.Get(ctx, "/reeve/agents/default/", clientv3.WithPrefix())
		if err == nil {
			last = map[string]string{}
			for _, kv := range resp.Kvs {
				var rec storev1.AgentRecord
				if err := proto.Unmarshal(kv.Value, &rec); err != nil {
					t.Fatal(err)
				}
				last[rec.GetAgentId()] = rec.GetSchedulerId()
			}
			if ok(last) {
				return last
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("agents never reached the expected placement; last %v", last)
	return nil
}

func schedulerClient(t *testing.T, addr string) reevev1.SchedulerServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return reevev1.NewSchedulerServiceClient(cc)
}

// runTasks submits n demo.orders tasks and waits for each to succeed.
func runTasks(ctx context.Context, t *testing.T, c reevev1.SchedulerServiceClient, prefix string, n int) {
	t.Helper()
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		in, _ := structpb.NewValue(map[string]any{"order_id": id})
		if _, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "demo.orders"}}, Input: in}); err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
	}
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		for {
			resp, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
			if err != nil {
				t.Fatalf("get %s: %v", id, err)
			}
			if st := resp.GetTask().GetState(); st == reevev1.TaskState_TASK_STATE_SUCCEEDED {
				break
			} else if st != reevev1.TaskState_TASK_STATE_PENDING && st != reevev1.TaskState_TASK_STATE_RUNNING {
				t.Fatalf("task %s ended %v: %s", id, st, resp.GetTask().GetReason())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
