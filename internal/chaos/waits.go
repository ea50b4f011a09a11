package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/chaos/workload"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Work that waits (issue 35): a share of the tasks run workload.WorkflowWait,
// whose approve step waits for a completion from outside and whose hook
// step the chaos agent defers. The load completes them at random moments
// (by token, from GetCompletionToken as an approver, or by name as an
// approver; sometimes twice: the repeat must be answered as the first;
// sometimes with an error: the task is then compensated; sometimes never:
// the wait's complete-by passes and the supervisor escalates), and some of
// them start later (start_time) or get a task deadline that fires.

// waitShare is the share of tasks that run WorkflowWait. They replace
// saga tasks, so the run is no longer.
const waitShare = 0.12

// waitAction is how the load completes one waiting step.
type waitAction struct {
	// After: the load's chosen moment, after it saw the step waiting.
	After time.Duration
	// Never: the load never completes it (its complete-by passes);
	// SkipFirst: it lets the first attempt expire and completes the next.
	Never, SkipFirst bool
	// ByName completes by (task, step) as an approver, else by token.
	ByName bool
	// FromAgent (the hook, by token): the token the agent passed on
	// (workload.Callback), sent as soon as it is there, often before the
	// agent's deferral is recorded; else one read with GetCompletionToken.
	FromAgent bool
	// Error completes with an error (the step fails for good).
	Error bool
	// Twice sends the same completion again once answered.
	Twice bool
}

// waitPlan is a WorkflowWait task's designed behaviour.
type waitPlan struct {
	Approve, Hook waitAction
	// StartIn: submitted with a start time this far ahead (0: at once).
	StartIn time.Duration
	// TaskTimeout: submitted with this task_timeout (0: none); the
	// designed ones fire (the approve step is answered after it).
	TaskTimeout time.Duration
}

// planWaits turns a waitShare of the saga tasks (not wide, not operator
// retries) into WorkflowWait tasks, from a stream of the seed of its own.
// The variants rotate so that every kind is exercised in a short run;
// the moments are random. Waits never answered and deadlines that fire
// are planned only in the first 70 % of the submission, so that the drain
// is no longer than it was.
func planWaits(out []plannedTask, seed uint64) {
	rng := rand.New(rand.NewPCG(seed^0x3a17, seed))
	k := 0
	for i := range out {
		pick, after1, after2, start := rng.Float64(), time.Duration(rng.Int64N(int64(2*time.Second))), time.Duration(rng.Int64N(int64(2*time.Second))), time.Second+time.Duration(rng.Int64N(int64(3*time.Second)))
		failA := rng.Float64()
		pt := &out[i]
		if pick >= waitShare || pt.Workflow != workload.Workflow || pt.OperatorRetry {
			continue
		}
		early := i < len(out)*7/10
		w := waitPlan{Approve: waitAction{After: after1}, Hook: waitAction{After: after2}}
		switch k % 10 {
		case 0:
		case 1:
			w.Approve.ByName, w.Approve.Twice, w.Hook.Twice = true, true, true
		case 2:
			w.Approve.ByName, w.Approve.Error = true, true
		case 3:
			w.Approve.Never = early
		case 4:
			w.Approve.Twice, w.Hook.Error = true, true
		case 5:
			w.StartIn, w.Approve.ByName = start, true
		case 6:
			if early {
				w.TaskTimeout, w.Approve.After = 2*time.Second, 4*time.Second
			}
		case 7:
			w.Approve.Error, w.Approve.Twice = true, true
		case 8:
			w.StartIn, w.Approve.ByName, w.Hook.ByName = start, true, true
		case 9:
			w.Approve.SkipFirst, w.Hook.ByName, w.Hook.Twice = early, true, true
		}
		w.Hook.FromAgent = k%3 == 0 && !w.Hook.ByName
		if k%5 == 2 && w.StartIn == 0 {
			w.StartIn = start
		}
		k++
		in := workload.Input{TransientPerMl: pt.Input.TransientPerMl, WorkMillis: pt.Input.WorkMillis}
		if failA < 0.1 {
			in.FailStep = workload.WaitStepFirst
		}
		pt.Workflow, pt.Input, pt.Wait = workload.WorkflowWait, in, w
	}
}

// completionRecord is a completion the load sent and a scheduler
// answered: applied (OK: the attempt and the state it made of the step)
// or refused.
type completionRecord struct {
	Task, Step string
	Attempt    int32
	State      reevev1.StepState
	ByName     bool
}

// waitLog collects what the load's completions were answered.
type waitLog struct {
	// book: the tokens the chaos agents passed on (nil: none).
	book *callbackBook

	mu        sync.Mutex
	fromAgent int
	applied   []completionRecord
	byToken   int
	byName    int
	errors    int
	repeats   int
	refused   int
	never     int
	problems  []Violation
}

func (l *waitLog) record(f func(l *waitLog)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l)
}

// report adds the counts and the violations the load saw.
func (l *waitLog) report(rep *Report) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rep.Waits.CompletedByToken, rep.Waits.CompletedByName = l.byToken, l.byName
	rep.Waits.CompletedWithError, rep.Waits.RepeatsAnsweredAsFirst = l.errors, l.repeats
	rep.Waits.CompletionsRefused, rep.Waits.LeftUnanswered = l.refused, l.never
	rep.Waits.TokensFromAgent = l.fromAgent
	for _, v := range l.problems {
		rep.add(v)
	}
}

// apply adds a wait task's start time and task deadline to req.
func (w waitPlan) apply(req *reevev1.SubmitTaskRequest, now time.Time) {
	if w.StartIn > 0 {
		req.StartTime = timestamppb.New(now.Add(w.StartIn))
	}
	if w.TaskTimeout > 0 {
		req.TaskTimeout = durationpb.New(w.TaskTimeout)
	}
}

// completeWaits follows a WorkflowWait task (GetTask as its client, every
// 200 ms) until it ends, and completes its approve step when it waits and
// its hook step when its agent deferred it, each attempt at most once, as
// the plan says. It gives up after 3 minutes (the checks then find the
// task not ended).
func completeWaits(ctx context.Context, c, approver reevev1.SchedulerServiceClient, pt plannedTask, log *waitLog) {
	acted := map[string]int32{}
	deadline := time.Now().Add(3 * time.Minute)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := c.GetTask(rctx, &reevev1.GetTaskRequest{TaskId: pt.ID})
		cancel()
		if status.Code(err) == codes.NotFound {
			return // ended and archived
		}
		if err == nil {
			t := resp.GetTask()
			if taskstate.TerminalTask(t.GetState()) {
				return
			}
			napStarted := false
			if nap := taskstate.FindStep(t, workload.WaitStepNap); nap != nil {
				napStarted = nap.GetState() == reevev1.StepState_STEP_STATE_WAITING || nap.GetState() == reevev1.StepState_STEP_STATE_SUCCEEDED
			}
			for _, s := range t.GetSteps() {
				var act waitAction
				attempt := s.GetAttempt()
				fromAgent := pt.Wait.Hook.FromAgent && log.book != nil
				switch {
				case s.GetName() == workload.WaitStepApprove && s.GetState() == reevev1.StepState_STEP_STATE_WAITING:
					act = pt.Wait.Approve
				case s.GetName() == workload.WaitStepHook && s.GetState() == reevev1.StepState_STEP_STATE_RUNNING && (s.GetDeferred() || fromAgent):
					act = pt.Wait.Hook
				case s.GetName() == workload.WaitStepHook && s.GetState() == reevev1.StepState_STEP_STATE_PENDING && fromAgent && napStarted:
					// Not dispatched yet: wait for its token from now on,
					// the first attempt's when none was counted yet.
					act, attempt = pt.Wait.Hook, max(attempt, 1)
				default:
					continue
				}
				if acted[s.GetName()] >= attempt {
					continue
				}
				acted[s.GetName()] = attempt
				if act.Never || (act.SkipFirst && attempt == 1) {
					log.record(func(l *waitLog) { l.never++ })
					continue
				}
				token := ""
				if act.FromAgent && log.book != nil {
					// The agent passes its token on just before it defers:
					// look for it at once and often, so that the
					// completion races the deferral.
					if token = log.book.await(ctx, pt.ID, s.GetName(), attempt, 5*time.Second); token == "" {
						if !s.GetDeferred() {
							acted[s.GetName()] = attempt - 1 // not there yet: look again
							continue
						}
					} else {
						act.After = 0
						log.record(func(l *waitLog) { l.fromAgent++ })
					}
				}
				completeOne(ctx, c, approver, pt.ID, s.GetName(), attempt, token, act, log)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond): // polling the task, as a callback service would not; the moments are the plan's
		}
	}
}

// completeOne completes attempt of step after act.After, by token (token,
// the one its agent passed on, or else from GetCompletionToken as an
// approver; sent as the task's client: the token is the capability) or by
// name (as an approver), retried through faults;
// with act.Twice it sends the same completion again once answered, which
// must be answered as the first and change nothing.
func completeOne(ctx context.Context, c, approver reevev1.SchedulerServiceClient, id, step string, attempt int32, token string, act waitAction, log *waitLog) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(act.After): // the plan's random moment
	}
	req := &reevev1.CompleteStepRequest{}
	if act.Error {
		req.Outcome = &reevev1.CompleteStepRequest_Error{Error: &reevev1.CompletionError{Code: "rejected", Message: "chaos: rejected from outside"}}
	} else {
		out, _ := structpb.NewValue(map[string]any{"approved_by": "chaos", "attempt": float64(attempt)})
		req.Outcome = &reevev1.CompleteStepRequest_Output{Output: out}
	}
	via := c
	switch {
	case act.ByName:
		req.TaskId, req.Step, via = id, step, approver
	case token != "":
		req.Token = token
	default:
		var tok *reevev1.GetCompletionTokenResponse
		code := retryCall(ctx, func(rctx context.Context) error {
			var err error
			tok, err = approver.GetCompletionToken(rctx, &reevev1.GetCompletionTokenRequest{TaskId: id, Step: step})
			return err
		})
		if code != codes.OK {
			if code != codes.FailedPrecondition && code != codes.NotFound {
				log.record(func(l *waitLog) {
					l.problems = append(l.problems, Violation{Invariant: "completions answered", Task: id, Step: step, Attempt: attempt, Detail: "GetCompletionToken: " + code.String()})
				})
			}
			log.record(func(l *waitLog) { l.refused++ })
			return
		}
		req.Token = tok.GetToken()
	}
	var first *reevev1.CompleteStepResponse
	code := retryCall(ctx, func(rctx context.Context) error {
		var err error
		first, err = via.CompleteStep(rctx, req)
		return err
	})
	switch code {
	case codes.OK:
	case codes.FailedPrecondition, codes.NotFound:
		// Not waiting any more: expired, the task canceled, compensated or
		// past its deadline, or (by name) at a later attempt.
		log.record(func(l *waitLog) { l.refused++ })
		return
	default:
		log.record(func(l *waitLog) {
			l.problems = append(l.problems, Violation{Invariant: "completions answered", Task: id, Step: step, Attempt: attempt, Detail: "CompleteStep: " + code.String()})
		})
		return
	}
	log.record(func(l *waitLog) {
		l.applied = append(l.applied, completionRecord{Task: id, Step: step, Attempt: first.GetRef().GetAttempt(), State: first.GetState(), ByName: act.ByName})
		if act.ByName {
			l.byName++
		} else {
			l.byToken++
		}
		if act.Error {
			l.errors++
		}
	})
	if !act.Twice {
		return
	}
	var again *reevev1.CompleteStepResponse
	code = retryCall(ctx, func(rctx context.Context) error {
		var err error
		again, err = via.CompleteStep(rctx, req)
		return err
	})
	const inv = "a repeated completion is answered as the first"
	switch {
	case code != codes.OK:
		log.record(func(l *waitLog) {
			l.problems = append(l.problems, Violation{Invariant: inv, Task: id, Step: step, Attempt: attempt, Detail: "the repeat was answered " + code.String()})
		})
	case !again.GetRepeated() || again.GetState() != first.GetState() || !proto.Equal(again.GetRef(), first.GetRef()):
		log.record(func(l *waitLog) {
			l.problems = append(l.problems, Violation{Invariant: inv, Task: id, Step: step, Attempt: attempt,
				Detail: fmt.Sprintf("first %v, repeat %v", first, again)})
		})
	default:
		log.record(func(l *waitLog) { l.repeats++ })
	}
}

// retryCall calls f through faults (UNAVAILABLE, DEADLINE_EXCEEDED,
// ABORTED, RESOURCE_EXHAUSTED, CANCELED: the same call again, for up to 2
// minutes) and returns the final code.
func retryCall(ctx context.Context, f func(context.Context) error) codes.Code {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(rctx)
		cancel()
		code := status.Code(err)
		switch code {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted, codes.Canceled:
		default:
			return code
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return code
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// callbackBook reads the tokens the chaos agents pass on
// (workload.CallbackSuffix files in the side-effect directory), as the
// external system a real handler hands its token to would receive them.
type callbackBook struct {
	dir string

	mu      sync.Mutex
	offsets map[string]int64
	tokens  map[callbackKey]string
}

// callbackKey names an execution in the callbackBook.
type callbackKey struct {
	task, step string
	attempt    int32
}

func newCallbackBook(dir string) *callbackBook {
	return &callbackBook{dir: dir, offsets: map[string]int64{}, tokens: map[callbackKey]string{}}
}

// await returns the token passed on for the execution, looking every 5 ms
// for up to timeout; "" if none came.
func (b *callbackBook) await(ctx context.Context, task, step string, attempt int32, timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		if tok := b.lookup(task, step, attempt); tok != "" {
			return tok
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return ""
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond): // reading a file another process appends to
		}
	}
}

// lookup reads what the files gained since the last call (whole lines
// only) and returns the execution's token, if passed on.
func (b *callbackBook) lookup(task, step string, attempt int32) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	files, _ := filepath.Glob(filepath.Join(b.dir, "*"+workload.CallbackSuffix))
	for _, f := range files {
		data, err := readFrom(f, b.offsets[f])
		if err != nil {
			continue
		}
		end := bytes.LastIndexByte(data, '\n') + 1
		for _, line := range bytes.Split(data[:end], []byte{'\n'}) {
			var cb workload.Callback
			if json.Unmarshal(line, &cb) == nil {
				b.tokens[callbackKey{cb.Task, cb.Step, cb.Attempt}] = cb.Token
			}
		}
		b.offsets[f] += int64(end)
	}
	return b.tokens[callbackKey{task, step, attempt}]
}

// readFrom reads path from offset to its end.
func readFrom(path string, offset int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}
