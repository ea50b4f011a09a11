package cluster_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/cluster"
	"github.com/reeve-org/reeve/internal/cluster/clustertest"
	"github.com/reeve-org/reeve/internal/demo"
	"github.com/reeve-org/reeve/internal/store"
)

// Durable timers (issue 35) on a production-like cluster of processes with
// mutual TLS (3 etcd members, 2 schedulers, 2 supervisors, a demo agent):
// a sleep step and a delayed start are submitted through one scheduler;
// that scheduler and the leading supervisor are SIGKILLed while both wait;
// the sleep ends and the task starts on time through the survivors.
func TestTimersSurviveSchedulerKillAndSupervisorFailover(t *testing.T) {
	reeve, etcd := clustertest.Reeve(t), clustertest.Tool(t, "etcd")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	nap := &reevev1.Workflow{Name: "timer.nap", Steps: []*reevev1.StepSpec{
		{Name: "nap", Sleep: durationpb.New(8 * time.Second)},
		{Name: "ship", Type: "shipping.ship", DependsOn: []string{"nap"}, Timeout: durationpb.New(10 * time.Second)},
	}}
	c := clustertest.Start(ctx, t, cluster.Config{Dir: t.TempDir(), Reeve: reeve, Etcd: etcd, NoFsync: true, Secure: true,
		Supervisors: 2, Agents: 1, SessionTTL: 3, AgentArgs: func(int) []string { return []string{"--demo"} },
		Workflows: append(demo.Workflows(), nap)})
	clustertest.RequireSecure(ctx, t, c)
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	dial, err := c.DialOptions(cluster.Client)
	if err != nil {
		t.Fatal(err)
	}
	client := func(addr string) reevev1.SchedulerServiceClient {
		cc, err := grpc.NewClient(addr, dial...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return reevev1.NewSchedulerServiceClient(cc)
	}
	first, second := client(c.SchedulerAddrs[0]), client(c.SchedulerAddrs[1])

	in, _ := structpb.NewValue(map[string]any{"order_id": "o-1"})
	start := time.Now().Add(8 * time.Second)
	if _, err := first.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "napping", Input: in,
		Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "timer.nap"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := first.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "later", Input: in, StartTime: timestamppb.New(start),
		Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "demo.orders"}}}); err != nil {
		t.Fatal(err)
	}

	// Kill the scheduler they were submitted through and the leader.
	cands, err := cli.Get(ctx, store.NewLayout(store.DefaultPrefix).ElectionCandidates(), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(cands.Kvs) == 0 {
		t.Fatalf("no supervisor leader: %v", err)
	}
	leader := string(cands.Kvs[0].Value)
	for _, p := range append(append([]*cluster.Process(nil), c.Schedulers[0]), c.Supervisors...) {
		if p == c.Schedulers[0] || p.Name == leader {
			if err := p.Kill(); err != nil {
				t.Fatal(err)
			}
			t.Logf("killed %s", p.Name)
		}
	}

	for _, id := range []string{"napping", "later"} {
		var task *reevev1.Task
		for {
			resp, err := second.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
			if err != nil {
				t.Fatalf("get %s: %v", id, err)
			}
			task = resp.GetTask()
			if task.GetState() == reevev1.TaskState_TASK_STATE_SUCCEEDED {
				break
			}
			if st := task.GetState(); st != reevev1.TaskState_TASK_STATE_PENDING && st != reevev1.TaskState_TASK_STATE_RUNNING {
				t.Fatalf("task %s ended %v: %s", id, st, task.GetReason())
			}
			time.Sleep(100 * time.Millisecond) // polling a remote cluster's task
		}
		switch id {
		case "napping":
			n := task.GetSteps()[0]
			if end, due := n.GetEndTime().AsTime(), n.GetReadyTime().AsTime().Add(8*time.Second); end.Before(due) {
				t.Fatalf("the sleep ended at %v, before %v", end, due)
			} else {
				t.Logf("the sleep ended %v after its time, across the kills", end.Sub(due).Round(time.Millisecond))
			}
		case "later":
			if rt := task.GetSteps()[0].GetReadyTime().AsTime(); rt.Before(start) {
				t.Fatalf("the delayed task's first step was ready at %v, before its start %v", rt, start)
			} else {
				t.Logf("the delayed task started %v after its start time, across the kills", rt.Sub(start).Round(time.Millisecond))
			}
		}
	}
	clustertest.Verify(ctx, t, cli)
	clustertest.NoRefusedCalls(t, c)
}
