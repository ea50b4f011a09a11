package workload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// Workflow is the name of the chaos suite's main workflow; WorkflowFail is
// the same steps escalating to fail (the task ends FAILED, for an operator
// to retry); WorkflowWide is the wide one.
const (
	Workflow     = "chaos.saga"
	WorkflowFail = "chaos.saga-fail"
	WorkflowWide = "chaos.wide"
)

// StepNames are the steps of the chaos workflow, in dependency order.
var StepNames = []string{"a", "b", "c"}

// WideWidth is how many parallel root steps the wide workflow has (w00 …
// w63); every other one (the even ones) has a compensation, and a step
// "join", with a compensation, depends on all of them.
const WideWidth = 64

// WideJoin is the wide workflow's last step.
const WideJoin = "join"

// WideStepNames are the wide workflow's steps, roots first, then the join.
func WideStepNames() []string {
	out := make([]string, 0, WideWidth+1)
	for i := range WideWidth {
		out = append(out, fmt.Sprintf("w%02d", i))
	}
	return append(out, WideJoin)
}

// MaxTxnOps is the --max-txn-ops the chaos cluster's etcd members run with
// (and its schedulers are told): the wide workflow needs 2·64 + 2·32 + 12 =
// 204 operations in one transaction, more than etcd's default of 128.
const MaxTxnOps = 512

// Step timing of the chaos workflow: short enough that a killed agent costs
// seconds, long enough that network faults of a few hundred ms do not expire
// every attempt.
const (
	stepTimeout   = 3 * time.Second
	reassignAfter = time.Second
)

// MaxAttempts is the max attempts of the chaos steps' retry policy: a step
// whose Input.FailUntilAttempt is MaxAttempts fails for good in its first
// round.
const MaxAttempts = 6

// Workflows returns the chaos workflows. chaos.saga: a → b → c, each step
// with a compensation, escalating to compensation when it fails for good,
// and reassigned reassignAfter after its agent's stream ends (rather than at
// its complete-by).
// chaos.saga-fail: the same steps escalating to fail. chaos.wide: 64
// parallel roots, the even ones with a compensation, joined by a
// compensable step; escalation compensate. Compensations retry longer than
// steps so that faults alone do not make a task FAILED. Registering
// chaos.wide needs schedulers told an etcd limit of at least 204
// operations per transaction (MaxTxnOps).
func Workflows() []*reevev1.Workflow {
	retry := &reevev1.RetryPolicy{MaxAttempts: MaxAttempts, InitialBackoff: durationpb.New(100 * time.Millisecond), MaxBackoff: durationpb.New(time.Second)}
	undoRetry := &reevev1.RetryPolicy{MaxAttempts: 3 * MaxAttempts, InitialBackoff: durationpb.New(100 * time.Millisecond), MaxBackoff: durationpb.New(time.Second)}
	step := func(name string, deps []string, undo bool, esc reevev1.Escalation) *reevev1.StepSpec {
		sp := &reevev1.StepSpec{Name: name, Type: "chaos.work", DependsOn: deps, Timeout: durationpb.New(stepTimeout), RetryPolicy: retry, Escalation: esc}
		if undo {
			sp.Compensation = &reevev1.CompensationSpec{Type: "chaos.undo", Timeout: durationpb.New(stepTimeout), RetryPolicy: undoRetry}
		}
		return sp
	}
	saga := func(name, desc string, esc reevev1.Escalation) *reevev1.Workflow {
		w := &reevev1.Workflow{Name: name, Description: desc}
		var prev []string
		for _, n := range StepNames {
			w.Steps = append(w.Steps, step(n, prev, true, esc))
			prev = []string{n}
		}
		return w
	}
	reassigned := saga(Workflow, "Chaos suite: three steps, each undone by its compensation when a later one fails for good.", reevev1.Escalation_ESCALATION_COMPENSATE)
	for _, sp := range reassigned.Steps {
		sp.ReassignAfterDisconnect = durationpb.New(reassignAfter)
	}
	wide := &reevev1.Workflow{Name: WorkflowWide, Description: "Chaos suite: 64 parallel steps (the even ones compensable) and a join."}
	names := WideStepNames()
	for i, n := range names[:WideWidth] {
		wide.Steps = append(wide.Steps, step(n, nil, i%2 == 0, reevev1.Escalation_ESCALATION_COMPENSATE))
	}
	wide.Steps = append(wide.Steps, step(WideJoin, names[:WideWidth], true, reevev1.Escalation_ESCALATION_COMPENSATE))
	return []*reevev1.Workflow{
		reassigned,
		saga(WorkflowFail, "Chaos suite: three steps; a step that fails for good fails the task, for an operator to retry.", reevev1.Escalation_ESCALATION_FAIL),
		wide,
		waitWorkflow(retry, undoRetry),
	}
}

// Input is a chaos task's input: which step fails for good (none when
// empty), the share of attempts that fail transiently (per mille) and how
// long each step works. With FailUntilAttempt > 0 the fail step fails
// (retryably) only while its attempt is at most FailUntilAttempt: with
// FailUntilAttempt = the retry policy's max attempts it fails for good in
// its first round (which ends at an attempt ≥ max attempts) and succeeds
// once an operator retried it (the attempt keeps growing).
type Input struct {
	FailStep         string `json:"fail_step,omitempty"`
	FailUntilAttempt int    `json:"fail_until_attempt,omitempty"`
	TransientPerMl   int    `json:"transient_per_mille,omitempty"`
	WorkMillis       int    `json:"work_ms,omitempty"`
}

// SideEffect is one line of an agent's side-effect log: an execution that
// performed its effect. The log is append-only; a line is written before
// the handler returns, so every result the scheduler accepted has its line
// (the reverse does not hold: an agent killed after writing never reports).
type SideEffect struct {
	Key          string `json:"key"`
	Task         string `json:"task"`
	Step         string `json:"step"`
	Attempt      int    `json:"attempt"`
	Compensation bool   `json:"compensation,omitempty"`
	Agent        string `json:"agent"`
	At           int64  `json:"at"` // unix ns
}

// SideEffectLog appends side effects to a file, one JSON line each, and
// the completion tokens of the steps the agent defers to another
// (CallbackSuffix).
type SideEffectLog struct {
	mu        sync.Mutex
	f         *os.File
	callbacks *os.File
}

// OpenSideEffectLog opens (creating) path, and path+CallbackSuffix, for
// appending.
func OpenSideEffectLog(path string) (*SideEffectLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("side-effect log: %w", err)
	}
	cb, err := os.OpenFile(path+CallbackSuffix, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("side-effect log: %w", err)
	}
	return &SideEffectLog{f: f, callbacks: cb}, nil
}

// Append writes e as one line with one write(2).
func (l *SideEffectLog) Append(e SideEffect) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err = l.f.Write(append(b, '\n'))
	return err
}

// Close closes the files.
func (l *SideEffectLog) Close() error { return errors.Join(l.f.Close(), l.callbacks.Close()) }

// Register registers the chaos handlers on a: every execution first appends
// its side effect to log, then works, then fails for good (the task's
// fail_step), fails transiently (a share of attempts picked by a hash of
// the idempotency key and attempt, so the same on replay) or succeeds.
func Register(a *agentsdk.Agent, log *SideEffectLog) {
	handle := func(ctx context.Context, s *agentsdk.Step) (any, error) {
		var in Input
		if err := s.Input(&in); err != nil {
			return nil, agentsdk.Permanent(err)
		}
		if err := log.Append(SideEffect{Key: s.IdempotencyKey, Task: s.TaskID, Step: s.Name, Attempt: s.Attempt,
			Compensation: s.Compensation, Agent: a.ID(), At: time.Now().UnixNano()}); err != nil {
			return nil, fmt.Errorf("side-effect log: %w", err)
		}
		if in.WorkMillis > 0 {
			t := time.NewTimer(time.Duration(in.WorkMillis) * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-t.C:
			}
		}
		if !s.Compensation && s.Name == in.FailStep {
			if in.FailUntilAttempt == 0 {
				return nil, agentsdk.Permanent(errors.New("chaos: designed to fail"))
			}
			if s.Attempt <= in.FailUntilAttempt {
				return nil, fmt.Errorf("chaos: designed to fail until attempt %d", in.FailUntilAttempt)
			}
		}
		if in.TransientPerMl > 0 && int(hash(s.IdempotencyKey, s.Attempt)%1000) < in.TransientPerMl {
			return nil, errors.New("chaos: transient failure")
		}
		return map[string]int{"attempt": s.Attempt}, nil
	}
	a.Handle("chaos.work", handle)
	a.Handle("chaos.undo", handle)
	registerHook(a, log)
}

func hash(key string, attempt int) uint32 {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", key, attempt)
	return h.Sum32()
}
