package chaos

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

// Workflow is the name of the chaos suite's workflow.
const Workflow = "chaos.saga"

// StepNames are the steps of the chaos workflow, in dependency order.
var StepNames = []string{"a", "b", "c"}

// Step timing of the chaos workflow: short enough that a killed agent costs
// seconds, long enough that network faults of a few hundred ms do not expire
// every attempt.
const (
	stepTimeout = 3 * time.Second
	maxAttempts = 6
)

// Workflows returns the chaos workflow: a → b → c, each step with a
// compensation, escalating to compensation when it fails for good. The
// compensation retries longer than the step so that faults alone do not
// make a task FAILED.
func Workflows() []*reevev1.Workflow {
	retry := &reevev1.RetryPolicy{MaxAttempts: maxAttempts, InitialBackoff: durationpb.New(100 * time.Millisecond), MaxBackoff: durationpb.New(time.Second)}
	undoRetry := &reevev1.RetryPolicy{MaxAttempts: 3 * maxAttempts, InitialBackoff: durationpb.New(100 * time.Millisecond), MaxBackoff: durationpb.New(time.Second)}
	w := &reevev1.Workflow{Name: Workflow, Description: "Chaos suite: three steps, each undone by its compensation when a later one fails for good."}
	var prev []string
	for _, name := range StepNames {
		w.Steps = append(w.Steps, &reevev1.StepSpec{
			Name: name, Type: "chaos.work", DependsOn: prev, Timeout: durationpb.New(stepTimeout), RetryPolicy: retry,
			Compensation: &reevev1.CompensationSpec{Type: "chaos.undo", Timeout: durationpb.New(stepTimeout), RetryPolicy: undoRetry},
			Escalation:   reevev1.Escalation_ESCALATION_COMPENSATE,
		})
		prev = []string{name}
	}
	return []*reevev1.Workflow{w}
}

// Input is a chaos task's input: which step fails for good (none when
// empty), the share of attempts that fail transiently (per mille) and how
// long each step works.
type Input struct {
	FailStep       string `json:"fail_step,omitempty"`
	TransientPerMl int    `json:"transient_per_mille,omitempty"`
	WorkMillis     int    `json:"work_ms,omitempty"`
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

// SideEffectLog appends side effects to a file, one JSON line each.
type SideEffectLog struct {
	mu sync.Mutex
	f  *os.File
}

// OpenSideEffectLog opens (creating) path for appending.
func OpenSideEffectLog(path string) (*SideEffectLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("side-effect log: %w", err)
	}
	return &SideEffectLog{f: f}, nil
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

// Close closes the file.
func (l *SideEffectLog) Close() error { return l.f.Close() }

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
			return nil, agentsdk.Permanent(errors.New("chaos: designed to fail"))
		}
		if in.TransientPerMl > 0 && int(hash(s.IdempotencyKey, s.Attempt)%1000) < in.TransientPerMl {
			return nil, errors.New("chaos: transient failure")
		}
		return map[string]int{"attempt": s.Attempt}, nil
	}
	a.Handle("chaos.work", handle)
	a.Handle("chaos.undo", handle)
}

func hash(key string, attempt int) uint32 {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", key, attempt)
	return h.Sum32()
}
