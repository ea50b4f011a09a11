package chaos

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/chaos/workload"
	"github.com/reeve-org/reeve/internal/etcdtest"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/internal/tlsconfig"
	"github.com/reeve-org/reeve/scheduler"
)

// The operator retry and the wide workflow, end to end on a real scheduler
// and etcd without faults: a task of the retry share ends FAILED with an
// alert, RetryStep at wrong points is refused, RetryStep of the failed step
// makes it end SUCCEEDED; a wide task whose join fails for good undoes its
// 32 compensable roots and its history (more than a record keeps) is put
// together from the record's versions; the checker finds nothing wrong and
// counts all of it.
// startChaosEnv starts etcd (with the chaos cluster's --max-txn-ops), a
// scheduler told so, a supervisor (it recovers executions whose results
// were not recorded in time), registers the chaos workflows and runs one
// chaos agent logging to cfg's side-effect directory.
func startChaosEnv(t *testing.T) (*testenv.Env, *testenv.Scheduler, Config) {
	t.Helper()
	env := testenv.New(t, etcdtest.WithMaxTxnOps(workload.MaxTxnOps))
	s := env.StartScheduler("", scheduler.WithEtcdMaxTxnOps(workload.MaxTxnOps))
	env.StartSupervisor([]*testenv.Scheduler{s})
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, w := range workload.Workflows() {
		if _, err := c.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: w}); err != nil {
			t.Fatalf("register %s: %v", w.GetName(), err)
		}
	}
	cfg := Config{Dir: t.TempDir()}
	if err := os.MkdirAll(cfg.sideEffectDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	log, err := workload.OpenSideEffectLog(filepath.Join(cfg.sideEffectDir(), "agent-1.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	// At most 8 steps at once: a task's results are recorded one write
	// after another (a store batch holds one write per task), and with the
	// race detector on a loaded machine 64 of them took longer than the
	// steps' 3 s timeout, so that every round expired again.
	agent, err := agentsdk.New([]string{s.Addr}, agentsdk.WithAgentID("agent-1"), agentsdk.WithLogger(testenv.Logger()), agentsdk.WithMaxConcurrentSteps(8))
	if err != nil {
		t.Fatal(err)
	}
	workload.Register(agent, log)
	actx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan error, 1)
	go func() { agentDone <- agent.Run(actx) }()
	t.Cleanup(func() { stopAgent(); <-agentDone; log.Close() })
	return env, s, cfg
}

func TestOperatorRetryAndWideTaskEndToEnd(t *testing.T) {
	env, s, cfg := startChaosEnv(t)
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A scheduler told etcd's default limit refuses the wide workflow.
	narrow := env.StartScheduler("")
	if _, err := narrow.Client(t).RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: workload.Workflows()[2]}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("wide workflow on a scheduler told 128 operations per transaction: %v, want INVALID_ARGUMENT", err)
	}

	cli := env.Etcd.Client()
	head, err := cli.Get(ctx, "start")
	if err != nil {
		t.Fatal(err)
	}
	pager := newHistoryPager(cli, layout.Task("default", "wide-"))
	pctx, stopPager := context.WithCancel(ctx)
	pagerDone := make(chan struct{})
	go func() { defer close(pagerDone); pager.run(pctx, head.Header.Revision+1) }()

	plan := []plannedTask{
		{ID: "retried", Workflow: workload.WorkflowFail, Input: workload.Input{FailStep: "b", FailUntilAttempt: workload.MaxAttempts}, OperatorRetry: true,
			RetryWrongAfter: time.Millisecond, RetryWrongStep: "c"},
		{ID: "wide-1", Workflow: workload.WorkflowWide, Input: workload.Input{FailStep: workload.WideJoin}},
		{ID: "saga", Workflow: workload.Workflow, Input: workload.Input{FailStep: "c"}},
	}
	ops := &operatorLog{}
	n, err := submit(ctx, []string{s.Addr}, tlsconfig.Files{}, tlsconfig.Files{}, tlsconfig.Files{}, plan, 100, ops, &waitLog{}, t.Logf)
	if err != nil || n != len(plan) {
		t.Fatalf("submitted %d of %d: %v", n, len(plan), err)
	}
	if _, err := waitDrained(ctx, taskread.New(store.New(cli), nil), len(plan), time.Minute); err != nil {
		for _, pt := range plan {
			if tk, gerr := getTask(ctx, c, pt.ID); gerr == nil && !taskstate.TerminalTask(tk.GetState()) {
				h := tk.GetHistory()
				t.Logf("%s is %s; last events: %v", pt.ID, tk.GetState(), h[max(0, len(h)-3):])
				for _, st := range tk.GetSteps() {
					if st.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED {
						t.Logf("  step %s %s attempt %d failures %d nb %v ready %v", st.GetName(), st.GetState(), st.GetAttempt(), st.GetFailureCount(), st.GetNotBefore(), st.GetReadyTime())
					}
				}
			}
		}
		t.Fatal(err)
	}
	stopPager()
	<-pagerDone
	rep := &Report{}
	ops.report(rep)
	if err := check(ctx, cli, taskread.New(store.New(cli), nil), cfg, plan, pager, nil, rep); err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("violations: %+v", rep.Violations)
	}
	// Refused: c while the task ran, a (SUCCEEDED) while it was FAILED, a
	// once it SUCCEEDED.
	type counts struct {
		RetryTasks, TasksRetried, RetriedSucceeded, RetriesAccepted, RetriesRefused, RetriesRefusedAtWrongPoints int
		FailedWithAlert, WideTasks, WideHistoryPaged, DesignedToFail                                             int
	}
	want := counts{RetryTasks: 1, TasksRetried: 1, RetriedSucceeded: 1, RetriesAccepted: 1, RetriesRefused: 3, RetriesRefusedAtWrongPoints: 3,
		FailedWithAlert: 1, WideTasks: 1, WideHistoryPaged: 1, DesignedToFail: 2}
	got := counts{RetryTasks: rep.RetryTasks, TasksRetried: rep.TasksRetried, RetriedSucceeded: rep.RetriedSucceeded, RetriesAccepted: rep.RetriesAccepted,
		RetriesRefused: rep.RetriesRefused, RetriesRefusedAtWrongPoints: rep.RetriesRefusedAtWrongPoints, FailedWithAlert: rep.FailedWithAlert,
		WideTasks: rep.WideTasks, WideHistoryPaged: rep.WideHistoryPaged, DesignedToFail: rep.DesignedToFail}
	if got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
	if rep.WideStates["COMPENSATED"] != 1 || rep.States["SUCCEEDED"] != 1 || rep.States["COMPENSATED"] != 2 {
		t.Fatalf("states %v, wide %v; want the retried task SUCCEEDED, the others COMPENSATED", rep.States, rep.WideStates)
	}
	// The join failed for good: its 32 compensable roots were undone.
	if rep.Compensations != workload.WideWidth/2+2 {
		t.Fatalf("%d compensations, want %d (32 wide roots, a and b of the saga)", rep.Compensations, workload.WideWidth/2+2)
	}
}

// losingSupervisor answers the first accepted RetryStep with UNAVAILABLE,
// as a fault between the scheduler and the operator would: the retry was
// applied, its answer lost.
type losingSupervisor struct {
	reevev1.SupervisorServiceClient
	lost int
}

func (l *losingSupervisor) RetryStep(ctx context.Context, in *reevev1.RetryStepRequest, opts ...grpc.CallOption) (*reevev1.RetryStepResponse, error) {
	resp, err := l.SupervisorServiceClient.RetryStep(ctx, in, opts...)
	if err == nil && l.lost == 0 {
		l.lost++
		return nil, status.Error(codes.Unavailable, "chaos test: answer lost")
	}
	return resp, err
}

// An operator's RetryStep whose answer was lost is re-sent and refused,
// because the first call was applied (RetryStep without a fence is not
// idempotent): the operator sees the task moved on and does not report a
// refused retry (seed 7 of the full run did, before).
func TestRetryOperatorSurvivesALostAnswer(t *testing.T) {
	_, s, _ := startChaosEnv(t)
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pt := plannedTask{ID: "lost", Workflow: workload.WorkflowFail, Input: workload.Input{FailStep: "a", FailUntilAttempt: workload.MaxAttempts}, OperatorRetry: true}
	if err := submitOne(ctx, c, pt); err != nil {
		t.Fatal(err)
	}
	sup := &losingSupervisor{SupervisorServiceClient: reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))}
	log := &operatorLog{}
	if err := retryOperator(ctx, c, sup, pt, log); err != nil {
		t.Fatal(err)
	}
	rep := &Report{}
	log.report(rep)
	if !rep.OK() || sup.lost != 1 || rep.RetriesAppliedThenRefused != 1 || rep.RetriesAccepted != 1 {
		t.Fatalf("answers lost %d; report %+v; want one retry applied, its answer lost, counted accepted, no violation", sup.lost, rep)
	}
	tk, err := getTask(ctx, c, pt.ID)
	if err != nil || tk.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("task %v (%v), want SUCCEEDED", tk.GetState(), err)
	}
}
