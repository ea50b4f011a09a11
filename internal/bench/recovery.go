package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/dial"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Recovery mode. One scenario per fresh embedded system (etcd, a scheduler
// and a supervisor): Tasks one-step tasks are submitted with no agent
// connected; a holding agent then takes them all, so their deadlines fall
// within a short window, and fails:
//
//   - silent: it acknowledges every assignment as it arrives (as the SDK
//     does, before running the handler), asks for no more work (Drain),
//     keeps its stream open and never answers: a hung handler behind a
//     live connection. Each step is re-dispatched after its complete-by
//     (the step timeout).
//   - killed: its steps declare a heartbeat timeout; it acknowledges and
//     heartbeats them, then its connection drops without a goodbye; each step is re-dispatched after
//     its last heartbeat plus the heartbeat timeout (their complete-by is a
//     minute away).
//
// A healthy agent, connected once the holder has everything, completes the
// re-dispatched steps at once. Re-dispatch latency is measured per step from
// its deadline (complete-by; for killed, the client's last heartbeat send
// time plus the heartbeat timeout, a slight overestimate) to the healthy
// agent receiving attempt 2.

// RecoveryScenario is one scenario's outcome. Times are in milliseconds.
type RecoveryScenario struct {
	Scenario string `json:"scenario"`
	Tasks    int    `json:"tasks"`
	// Redispatched counts steps the healthy agent received again.
	Redispatched int `json:"redispatched"`
	// RedispatchedEarly counts re-dispatches before the step's deadline
	// (the scenario is then not measuring recovery: e.g. the scheduler's
	// ack timeout took the attempt back first). Included in the
	// percentiles, as negative latencies.
	RedispatchedEarly int     `json:"redispatched_early"`
	RedispatchP50Ms   float64 `json:"redispatch_p50_ms"`
	RedispatchP95Ms   float64 `json:"redispatch_p95_ms"`
	RedispatchP99Ms   float64 `json:"redispatch_p99_ms"`
	RedispatchMaxMs   float64 `json:"redispatch_max_ms"`
	// DeadlineSpreadMs is the time between the first and last deadline.
	DeadlineSpreadMs float64 `json:"deadline_spread_ms"`
	// LastDoneMs is from the first deadline to the last task's success
	// being acknowledged.
	LastDoneMs float64 `json:"last_done_ms"`
	// Lost counts tasks that ended other than SUCCEEDED or disappeared;
	// Stuck counts tasks not finished when the scenario ended.
	Lost  int `json:"lost"`
	Stuck int `json:"stuck"`
	// ProcessCPUSec is this process's CPU time (etcd, scheduler, supervisor
	// and agents) from the first deadline to the end of the scenario.
	ProcessCPUSec float64 `json:"process_cpu_sec"`
	Error         string  `json:"error,omitempty"`
}

// RecoveryReport is the outcome of a recovery run.
type RecoveryReport struct {
	Scenarios []RecoveryScenario `json:"scenarios"`
}

// MaxRecoveryTasks bounds --tasks in recovery mode: one holding agent takes
// them all.
const MaxRecoveryTasks = 10000 // workflow.MaxConcurrentStepsLimit

const (
	recoveryHeartbeat = time.Second
	recoveryType      = "recovery"
)

// RunRecovery runs the silent and killed scenarios, each on its own
// embedded system.
func RunRecovery(ctx context.Context, cfg Config) (*RecoveryReport, error) {
	cfg.Embedded = true
	if err := cfg.defaults(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if cfg.Tasks > MaxRecoveryTasks {
		return nil, fmt.Errorf("bench: recovery: at most %d tasks (one agent holds them all), got %d", MaxRecoveryTasks, cfg.Tasks)
	}
	rep := &RecoveryReport{}
	for _, name := range []string{"silent", "killed"} {
		sc, err := runScenario(ctx, cfg, name)
		if err != nil {
			return nil, fmt.Errorf("bench: recovery %s: %w", name, err)
		}
		rep.Scenarios = append(rep.Scenarios, *sc)
	}
	return rep, nil
}

func runScenario(parent context.Context, cfg Config, name string) (*RecoveryScenario, error) {
	ctx, cancel := context.WithTimeout(parent, cfg.MaxDuration)
	defer cancel()
	tg, err := startEmbedded(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer tg.close()
	cc, err := dial.Schedulers(tg.sched)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	client := reevev1.NewSchedulerServiceClient(cc)

	n := cfg.Tasks
	spec := &reevev1.StepSpec{Name: "s", Type: recoveryType,
		RetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 5, InitialBackoff: durationpb.New(0)}}
	// The holder's claims of all n steps must finish before the first
	// deadline: 3 s, plus 0.5 ms a step.
	timeout := 3*time.Second + time.Duration(n)*500*time.Microsecond
	if name == "killed" {
		timeout = time.Minute
		spec.HeartbeatTimeout = durationpb.New(recoveryHeartbeat)
	}
	spec.Timeout = durationpb.New(timeout)
	wf := &reevev1.Workflow{Name: "recovery-" + name, Steps: []*reevev1.StepSpec{spec}}
	if _, err := client.RegisterWorkflow(ctx, &reevev1.RegisterWorkflowRequest{Workflow: wf}); err != nil {
		return nil, fmt.Errorf("register workflow: %w", err)
	}
	if err := submitAll(ctx, client, wf.GetName(), n); err != nil {
		return nil, err
	}

	// The holder takes every step.
	hctx, killHolder := context.WithCancel(ctx)
	defer killHolder()
	holder, err := openAgent(hctx, cc, "holder", n)
	if err != nil {
		return nil, err
	}
	deadlines := map[string]time.Time{} // task id -> deadline
	var refs []*reevev1.StepRef
	var first, last time.Time
	beat := func() error {
		for i := 0; i < len(refs); i += 1000 {
			m := &reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Heartbeat{Heartbeat: &reevev1.Heartbeat{Refs: refs[i:min(i+1000, len(refs))]}}}
			if err := holder.Send(m); err != nil {
				return fmt.Errorf("holder heartbeat: %w", err)
			}
		}
		return nil
	}
	lastBeat := time.Now()
	for len(refs) < n {
		// The killed holder heartbeats what it holds while it takes the
		// rest (taking 10,000 can outlast the heartbeat timeout).
		if name == "killed" && time.Since(lastBeat) >= recoveryHeartbeat/4 {
			if err := beat(); err != nil {
				return nil, err
			}
			lastBeat = time.Now()
		}
		m, err := holder.Recv()
		if err != nil {
			return nil, fmt.Errorf("holder: after %d of %d assignments: %w", len(refs), n, err)
		}
		a := m.GetAssignment()
		if a == nil {
			continue
		}
		// Acknowledge at once, as an agent whose gRPC side works does
		// (even when its handlers hang): otherwise the scheduler's ack
		// timeout takes the attempt back before its deadline.
		if err := holder.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_AssignmentAck{AssignmentAck: &reevev1.AssignmentAck{Ref: a.GetRef()}}}); err != nil {
			return nil, fmt.Errorf("holder ack: %w", err)
		}
		refs = append(refs, a.GetRef())
		deadlines[a.GetRef().GetTaskId()] = a.GetCompleteBy().AsTime()
	}
	if name == "killed" {
		// Beat once for everything, then drop the connection.
		if err := beat(); err != nil {
			return nil, err
		}
		lastBeat = time.Now()
		// Give the scheduler time to take the beats in before the
		// connection drops (a drop discards what it has not read): the
		// deadline it writes is then at or after lastBeat + the timeout,
		// and the latency measured from there errs on the long side.
		time.Sleep(200 * time.Millisecond)
		killHolder()
		for id := range deadlines {
			deadlines[id] = lastBeat.Add(recoveryHeartbeat)
		}
	} else {
		// Silent: it asks for no more work (else the scheduler, which
		// cannot tell it is silent, hands it the retries too), then reads
		// (and ignores) everything the scheduler sends.
		if err := holder.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Drain{Drain: &reevev1.Drain{Reason: "going silent"}}}); err != nil {
			return nil, fmt.Errorf("holder drain: %w", err)
		}
		go func() {
			for {
				if _, err := holder.Recv(); err != nil {
					return
				}
			}
		}()
	}
	for _, d := range deadlines {
		if first.IsZero() || d.Before(first) {
			first = d
		}
		if d.After(last) {
			last = d
		}
	}

	// The healthy agent completes the re-dispatched steps.
	healthy, err := openAgent(ctx, cc, "healthy", 2000)
	if err != nil {
		return nil, err
	}
	stopProfile, err := startCPUProfile(cfg.RecoveryCPUProfile, name)
	if err != nil {
		return nil, err
	}
	cpu0 := cpuSeconds()
	var (
		lat      samples
		acked    = map[string]bool{}
		lastDone time.Time
		early    int
		sendMu   sync.Mutex
		failures atomic.Int64
	)
	for len(acked) < n {
		m, err := healthy.Recv()
		if err != nil {
			break // ctx ended: what is not done is counted below
		}
		now := time.Now()
		switch {
		case m.GetAssignment() != nil:
			a := m.GetAssignment()
			if d, ok := deadlines[a.GetRef().GetTaskId()]; ok && a.GetRef().GetAttempt() == 2 {
				lat.add(now.Sub(d))
				if now.Before(d) {
					early++
				}
			}
			sendMu.Lock()
			err := healthy.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_AssignmentAck{AssignmentAck: &reevev1.AssignmentAck{Ref: a.GetRef()}}})
			if err == nil {
				err = healthy.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Result{Result: &reevev1.StepResult{
					Ref: a.GetRef(), Outcome: &reevev1.StepResult_Output{Output: structpb.NewNullValue()}}}})
			}
			sendMu.Unlock()
			if err != nil {
				failures.Add(1)
			}
		case m.GetResultAck() != nil:
			if ack := m.GetResultAck(); ack.GetAccepted() {
				acked[ack.GetRef().GetTaskId()] = true
				lastDone = now
			}
		}
	}
	cpu := cpuSeconds() - cpu0
	if err := stopProfile(); err != nil {
		return nil, err
	}

	sc := &RecoveryScenario{Scenario: name, Tasks: n, Redispatched: len(lat.all()), RedispatchedEarly: early,
		DeadlineSpreadMs: ms(last.Sub(first)), ProcessCPUSec: cpu}
	sc.RedispatchP50Ms, sc.RedispatchP95Ms, sc.RedispatchP99Ms, sc.RedispatchMaxMs = percentiles(lat.all())
	if !lastDone.IsZero() {
		sc.LastDoneMs = ms(lastDone.Sub(first))
	}
	// Every task's final state, read back.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(parent), time.Minute)
	defer rcancel()
	for id := range deadlines {
		resp, err := client.GetTask(rctx, &reevev1.GetTaskRequest{TaskId: id})
		switch {
		case err != nil:
			sc.Lost++
		case resp.GetTask().GetState() == reevev1.TaskState_TASK_STATE_SUCCEEDED:
		case taskstate.TerminalTask(resp.GetTask().GetState()):
			sc.Lost++
		default:
			sc.Stuck++
		}
	}
	if ctx.Err() != nil {
		sc.Error = fmt.Sprintf("scenario cut short after %s (--max-duration)", cfg.MaxDuration)
	}
	return sc, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// submitAll submits n tasks, 64 at a time.
func submitAll(ctx context.Context, c reevev1.SchedulerServiceClient, wf string, n int) error {
	ids := make(chan int)
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	for range 64 {
		wg.Go(func() {
			for i := range ids {
				_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("r-%06d", i),
					Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: wf}}})
				if err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, fmt.Errorf("submit: %w", err))
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		ids <- i
	}
	close(ids)
	wg.Wait()
	return firstErr
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// openAgent opens a raw agent stream serving recoveryType and waits for
// Registered.
func openAgent(ctx context.Context, cc *grpc.ClientConn, id string, max int) (reevev1.AgentService_ConnectClient, error) {
	st, err := reevev1.NewAgentServiceClient(cc).Connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&reevev1.ConnectRequest{Msg: &reevev1.ConnectRequest_Register{Register: &reevev1.Register{
		AgentId: id, StepTypes: []string{recoveryType}, MaxConcurrentSteps: int32(max)}}}); err != nil {
		return nil, err
	}
	m, err := st.Recv()
	if err != nil {
		return nil, fmt.Errorf("agent %s: register: %w", id, err)
	}
	if m.GetRegistered() == nil {
		return nil, errors.New("agent " + id + ": no Registered")
	}
	return st, nil
}

// startCPUProfile writes a CPU profile of the process to path + "." +
// scenario until the returned function is called; nothing when path is "".
func startCPUProfile(path, scenario string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path + "." + scenario)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
