package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// plannedTask is one task of the load and its designed behaviour.
type plannedTask struct {
	ID    string
	Input Input
	// CancelAfter: an operator cancels the task this long after it was
	// accepted (0: never), at whatever point it has reached.
	CancelAfter time.Duration
	// CompensateAfter: an operator compensates the task (CompensateTask,
	// no fence) this long after it was accepted (0: never), at whatever
	// point it has reached. Never together with CancelAfter.
	CompensateAfter time.Duration
}

// cancelShare and compensateShare are the shares of tasks an operator
// cancels, or compensates, at a random point.
const (
	cancelShare     = 0.05
	compensateShare = 0.05
)

// planTasks decides every task's behaviour from rng.
func planTasks(rng *rand.Rand, cfg Config) []plannedTask {
	out := make([]plannedTask, cfg.Tasks)
	for i := range out {
		in := Input{TransientPerMl: cfg.TransientPerMille, WorkMillis: 20 + rng.IntN(400)}
		if rng.Float64() < cfg.FailShare {
			in.FailStep = StepNames[rng.IntN(len(StepNames))]
		}
		out[i] = plannedTask{ID: fmt.Sprintf("chaos-%d-%05d", cfg.Seed, i), Input: in}
	}
	// Operator actions come from their own stream, so that a seed's task
	// behaviours stay what they were.
	ops := rand.New(rand.NewPCG(cfg.Seed^0xc0ffee, cfg.Seed))
	for i := range out {
		if ops.Float64() < cancelShare {
			out[i].CancelAfter = time.Duration(ops.Int64N(int64(2 * time.Second)))
		}
	}
	// Compensations from a stream of their own, so that a seed's cancels
	// stay what they were.
	comp := rand.New(rand.NewPCG(cfg.Seed^0xc0de, cfg.Seed))
	for i := range out {
		if comp.Float64() < compensateShare && out[i].CancelAfter == 0 {
			out[i].CompensateAfter = time.Duration(comp.Int64N(int64(2*time.Second))) + time.Millisecond
		}
	}
	return out
}

// dialSchedulers returns a client spreading requests round-robin over addrs.
func dialSchedulers(addrs []string) (*grpc.ClientConn, error) {
	r := manual.NewBuilderWithScheme("chaos")
	var state resolver.State
	for _, a := range addrs {
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a})
	}
	r.InitialState(state)
	return grpc.NewClient(r.Scheme()+":///schedulers", grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))
}

// submit submits the planned tasks at rate per second, each retried (same
// task id: idempotent) until accepted. It returns how many were accepted.
func submit(ctx context.Context, addrs []string, plan []plannedTask, rate float64, logf func(string, ...any)) (int, error) {
	cc, err := dialSchedulers(addrs)
	if err != nil {
		return 0, err
	}
	defer cc.Close()
	c := reevev1.NewSchedulerServiceClient(cc)
	sup := reevev1.NewSupervisorServiceClient(cc)
	var accepted atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	every := time.Duration(float64(time.Second) / rate)
	tick := time.NewTicker(every)
	defer tick.Stop()
	var firstErr error
	var errOnce sync.Once
	for i, pt := range plan {
		if i > 0 {
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := submitOne(ctx, c, pt); err != nil {
				errOnce.Do(func() { firstErr = err })
				return
			}
			accepted.Add(1)
			if pt.CancelAfter > 0 {
				if err := cancelOne(ctx, c, pt); err != nil {
					errOnce.Do(func() { firstErr = err })
				}
			}
			if pt.CompensateAfter > 0 {
				if err := operatorAct(ctx, pt.CompensateAfter, "compensate "+pt.ID, func(rctx context.Context) error {
					_, err := sup.CompensateTask(rctx, &reevev1.CompensateTaskRequest{TaskId: pt.ID, Reason: "chaos: operator compensate"})
					return err
				}); err != nil {
					errOnce.Do(func() { firstErr = err })
				}
			}
		})
		if (i+1)%500 == 0 {
			logf("chaos: %d tasks submitted", i+1)
		}
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return int(accepted.Load()), firstErr
}

func submitOne(ctx context.Context, c reevev1.SchedulerServiceClient, pt plannedTask) error {
	in, err := structpb.NewValue(map[string]any{"fail_step": pt.Input.FailStep, "transient_per_mille": pt.Input.TransientPerMl, "work_ms": pt.Input.WorkMillis})
	if err != nil {
		return err
	}
	req := &reevev1.SubmitTaskRequest{TaskId: pt.ID, Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: Workflow}}, Input: in}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.SubmitTask(rctx, req)
		cancel()
		switch status.Code(err) {
		case codes.OK, codes.AlreadyExists:
			return nil
		case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.NotFound, codes.ResourceExhausted, codes.Canceled:
			// A fault, or the workflow not registered yet: retry, same id.
		default:
			return fmt.Errorf("submit %s: %w", pt.ID, err)
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("submit %s: %w", pt.ID, errors.Join(err, ctx.Err()))
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// cancelOne cancels the task after its delay, as an operator would (see
// operatorAct).
func cancelOne(ctx context.Context, c reevev1.SchedulerServiceClient, pt plannedTask) error {
	return operatorAct(ctx, pt.CancelAfter, "cancel "+pt.ID, func(rctx context.Context) error {
		_, err := c.CancelTask(rctx, &reevev1.CancelTaskRequest{TaskId: pt.ID, Reason: "chaos: operator cancel"})
		return err
	})
}

// operatorAct runs an operator action after its delay, retried through
// faults; a refusal because of the task's state (FAILED_PRECONDITION: it
// ended, or the action does not apply where it is) is an outcome, not an
// error.
func operatorAct(ctx context.Context, after time.Duration, what string, act func(context.Context) error) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(after): // the operator's chosen moment, not a wait for a condition
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := act(rctx)
		cancel()
		switch status.Code(err) {
		case codes.OK, codes.FailedPrecondition:
			return nil
		case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted, codes.Canceled:
		default:
			return fmt.Errorf("%s: %w", what, err)
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("%s: %w", what, errors.Join(err, ctx.Err()))
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitDrained polls the state index until n tasks are terminal and none is
// pending, running or compensating, or timeout passes. It returns when.
func waitDrained(ctx context.Context, cli *clientv3.Client, n int, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	var live, ended int64
	for time.Now().Before(deadline) && ctx.Err() == nil {
		live, ended = 0, 0
		ok := true
		for _, st := range []reevev1.TaskState{reevev1.TaskState_TASK_STATE_PENDING, reevev1.TaskState_TASK_STATE_RUNNING, reevev1.TaskState_TASK_STATE_COMPENSATING} {
			cnt, err := countPrefix(ctx, cli, "/reeve/created-state/default/"+st.String()+"/")
			if err != nil {
				ok = false
				break
			}
			live += cnt
		}
		if ok {
			for _, st := range []reevev1.TaskState{reevev1.TaskState_TASK_STATE_SUCCEEDED, reevev1.TaskState_TASK_STATE_FAILED, reevev1.TaskState_TASK_STATE_COMPENSATED, reevev1.TaskState_TASK_STATE_CANCELED} {
				cnt, err := countPrefix(ctx, cli, "/reeve/created-state/default/"+st.String()+"/")
				if err != nil {
					ok = false
					break
				}
				ended += cnt
			}
		}
		if ok && live == 0 && ended >= int64(n) {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	return time.Now(), fmt.Errorf("not drained after %v: %d tasks still live, %d of %d ended", timeout, live, ended, n)
}

func countPrefix(ctx context.Context, cli *clientv3.Client, prefix string) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}
