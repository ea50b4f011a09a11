package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/internal/verify"
)

// A randomized run with an operator in it: while agents succeed, fail,
// hang and fail permanently at random and a scheduler crashes or stops
// gracefully, an operator fires RetryStep, CompensateTask, FailTask and
// CancelTask at random tasks, steps and attempts, in whatever state they
// happen to be. The cross
// product of action × task state × step state is what examples miss.
//
// Checked: every operator call answers OK or a refusal that names the
// state (FailedPrecondition, NotFound, InvalidArgument), never an internal
// error; `reeve verify` finds no violation at any sampled moment (one etcd
// revision each) nor at the end; every dispatched or queued step has its
// deadline key and no other exists at any sample; and once the operator
// stops, every task ends in a terminal state whose steps agree with it (no
// overdue step was left where it was). How long steps stay overdue depends
// on the machine's load: it is logged, not asserted.
func TestRandomOperatorActionsKeepEveryTaskMovingAndTheStoreConsistent(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const (
		tasks   = 20
		actions = 240
		timeout = 300 * time.Millisecond
	)
	env := testenv.New(t)
	s1, s2 := env.StartScheduler(""), env.StartScheduler("")
	env.StartSupervisor([]*testenv.Scheduler{s1, s2})

	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	intn := func(n int) int { mu.Lock(); defer mu.Unlock(); return rng.IntN(n) }
	// Forward steps: 8 % hang (the complete-by passes), 7 % are slow (still
	// running when the operator acts), 13 % fail and may be retried, 3 %
	// fail permanently. Compensations are slow more often (so that the
	// operator meets COMPENSATING tasks), and hang or fail less.
	behave := func(ctx context.Context, st *agentsdk.Step) (any, error) {
		hang, slow, transient, permanent := 8, 15, 28, 31
		if st.Compensation {
			hang, slow, transient, permanent = 3, 40, 48, 50
		}
		switch p := intn(100); {
		case p < hang:
			<-ctx.Done()
			return nil, ctx.Err()
		case p < slow:
			select {
			case <-time.After(time.Duration(intn(250)) * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case p < transient:
			return nil, errors.New("transient")
		case p < permanent:
			return nil, agentsdk.Permanent(errors.New("permanent"))
		}
		return map[string]int{"attempt": st.Attempt}, nil
	}
	runAgents(t, 3, []string{s1.Addr, s2.Addr}, behave)

	// Each task draws its shape: a chain or a fan-out, compensations on some
	// steps, heartbeats on some, and how a step that runs out of attempts
	// escalates. Tasks keep arriving while the operator acts, so that its
	// actions meet every stage of a task's life.
	c := s2.Client(t)
	var ids []string
	submitOne := func() {
		escalation := []reevev1.Escalation{reevev1.Escalation_ESCALATION_FAIL, reevev1.Escalation_ESCALATION_COMPENSATE,
			reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY}[intn(3)]
		spec := func(name, typ string, deps ...string) *reevev1.StepSpec {
			s := &reevev1.StepSpec{Name: name, Type: typ, DependsOn: deps, Timeout: durationpb.New(timeout),
				ScheduleToStartTimeout: durationpb.New(5 * time.Second),
				RetryPolicy:            &reevev1.RetryPolicy{MaxAttempts: 2, InitialBackoff: durationpb.New(30 * time.Millisecond)},
				Escalation:             escalation}
			if escalation == reevev1.Escalation_ESCALATION_WAIT_THEN_RETRY {
				s.EscalationWait = durationpb.New(200 * time.Millisecond)
			}
			if name == "a" || intn(3) > 0 { // COMPENSATE needs a step to undo
				s.Compensation = &reevev1.CompensationSpec{Type: "undo"}
			}
			if intn(3) == 0 {
				s.HeartbeatTimeout = durationpb.New(150 * time.Millisecond)
			}
			return s
		}
		id := fmt.Sprintf("op%03d", len(ids))
		ids = append(ids, id)
		if intn(2) == 0 {
			submit(t, c, id, spec("a", "a"), spec("b", "b", "a"), spec("c", "c", "b"))
		} else {
			submit(t, c, id, spec("a", "a"), spec("b", "b", "a"), spec("c", "c", "a"))
		}
	}
	for range tasks {
		submitOne()
	}

	etcd := env.Etcd.Client()
	stop := make(chan struct{})
	var (
		violationsMu sync.Mutex
		violations   []string
		samples      int
		worst        overdue // only the sampler writes it before Wait
	)
	report := func(vs ...string) {
		violationsMu.Lock()
		defer violationsMu.Unlock()
		if len(violations) < 50 {
			violations = append(violations, vs...)
		}
	}
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			rep, err := verify.Check(ctx, etcd, verify.Options{})
			cancel()
			if err != nil {
				continue // etcd busy: skip this sample
			}
			samples++
			for _, v := range rep.Violations {
				report(fmt.Sprintf("verify at revision %d: %s %s: %s", rep.Revision, v.Kind, v.Key, v.Detail))
			}
			vs, o := checkDeadlines(etcd)
			worst.max(o)
			report(vs...)
		}
	})

	// The operator, on the scheduler that survives. It acts on tasks that
	// can still change (a FAILED one can: an operator may retry or undo it),
	// and prefers a FAILED step for RetryStep when there is one.
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s2.Addr))
	live := append([]string(nil), ids...)
	outcomes := map[string]int{} // "action task-state code" -> count
	for n := range actions {
		if n == actions/3 {
			// s1 ends mid-run, either way a process ends: its agents move
			// to s2.
			if seed%2 == 0 {
				t.Log("s1 crashes")
				s1.Crash()
			} else {
				t.Log("s1 stops gracefully")
				s1.Stop()
			}
		}
		if n%4 == 0 {
			submitOne()
			live = append(live, ids[len(ids)-1])
		}
		if len(live) == 0 {
			continue
		}
		i := intn(len(live))
		id := live[i]
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		got, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: id})
		if err != nil {
			cancel()
			t.Fatalf("GetTask %s: %v", id, err)
		}
		task := got.GetTask()
		if taskstate.TerminalTask(task.GetState()) && task.GetState() != reevev1.TaskState_TASK_STATE_FAILED {
			live = append(live[:i], live[i+1:]...)
		}
		st := task.GetSteps()[intn(len(task.GetSteps()))]
		// The step's current attempt, an older one, or none.
		attempt := max([]int32{st.GetAttempt(), st.GetAttempt() - 1, 0}[intn(3)], 0)
		reason := fmt.Sprintf("walk %d", n)
		var action string
		switch p := intn(10); {
		case p < 4:
			action = "RetryStep"
			for _, s := range task.GetSteps() {
				if s.GetState() == reevev1.StepState_STEP_STATE_FAILED && intn(4) > 0 {
					st, attempt = s, []int32{s.GetAttempt(), 0}[intn(2)]
					break
				}
			}
			_, err = sup.RetryStep(ctx, &reevev1.RetryStepRequest{TaskId: id, Step: st.GetName(), Attempt: attempt, Reason: reason})
		case p < 6:
			action = "CompensateTask"
			_, err = sup.CompensateTask(ctx, &reevev1.CompensateTaskRequest{TaskId: id, Reason: reason})
		case p < 9:
			action = "FailTask"
			req := &reevev1.FailTaskRequest{TaskId: id, Reason: reason}
			if intn(2) == 0 {
				req.Step, req.Attempt = st.GetName(), attempt
			}
			_, err = sup.FailTask(ctx, req)
		default:
			action = "CancelTask"
			_, err = c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: id, Reason: reason})
		}
		cancel()
		code := status.Code(err)
		outcomes[fmt.Sprintf("%s/%s/%s", action, strings.TrimPrefix(task.GetState().String(), "TASK_STATE_"), code)]++
		switch code {
		case codes.OK, codes.FailedPrecondition, codes.NotFound, codes.InvalidArgument:
		default:
			t.Errorf("%s on %s (task %v, step %s %v attempt %d, asked attempt %d): %v",
				action, id, task.GetState(), st.GetName(), st.GetState(), st.GetAttempt(), attempt, err)
		}
		time.Sleep(time.Duration(intn(25)) * time.Millisecond) // let the run move between actions
	}
	t.Logf("operator outcomes: %s", formatCounts(outcomes))

	// A bound against a hang only: the tasks end within seconds.
	deadline := time.Now().Add(3 * time.Minute)
	for _, id := range ids {
		final := testenv.WaitTask(t, c, "default", id, time.Until(deadline))
		if err := terminalAgrees(final); err != nil {
			t.Errorf("task %s: %v", id, err)
		}
	}
	close(stop)
	sampler.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	rep, err := verify.Check(ctx, etcd, verify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations {
		report(fmt.Sprintf("verify at the end: %s %s: %s", v.Kind, v.Key, v.Detail))
	}
	if samples == 0 {
		t.Error("the sampler never completed a check")
	}
	end, _ := checkDeadlines(etcd)
	report(end...)
	t.Logf("longest a step was seen past its deadline: %v (%s)", worst.by, worst.step)
	for _, v := range violations {
		t.Errorf("seed %d: %s", seed, v)
	}
}

// terminalAgrees checks that a task is terminal and that its steps agree
// with its state: nothing runs or waits in a terminal task, a SUCCEEDED task
// succeeded in every step, and a COMPENSATED one left no step with a
// compensation succeeded and not undone.
func terminalAgrees(t *reevev1.Task) error {
	if !taskstate.TerminalTask(t.GetState()) {
		return fmt.Errorf("not terminal: %v", t.GetState())
	}
	for _, s := range t.GetSteps() {
		switch {
		case taskstate.Queued(s) || taskstate.Dispatched(s):
			return fmt.Errorf("%v with step %s %v (queued or dispatched)", t.GetState(), s.GetName(), s.GetState())
		case t.GetState() == reevev1.TaskState_TASK_STATE_SUCCEEDED && s.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED:
			return fmt.Errorf("SUCCEEDED with step %s %v", s.GetName(), s.GetState())
		case t.GetState() == reevev1.TaskState_TASK_STATE_COMPENSATED && s.GetState() == reevev1.StepState_STEP_STATE_SUCCEEDED &&
			taskstate.Spec(t, s.GetName()).GetCompensation() != nil:
			return fmt.Errorf("COMPENSATED with step %s SUCCEEDED and not undone", s.GetName())
		}
	}
	return nil
}

func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, m[k])
	}
	return b.String()
}
