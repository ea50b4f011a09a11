package schedule

import (
	"fmt"
	"strings"
)

// Overlap says what a schedule does when a nominal time comes while a task
// it started before is still running. The names are Temporal's.
type Overlap int

// The overlap policies. The zero value is OverlapSkip, the default.
const (
	// OverlapSkip does not start the new time while a run is active; the
	// time is recorded as skipped.
	OverlapSkip Overlap = iota
	// OverlapBufferOne starts the new time when the active run ends; while
	// one time is already buffered, a further one is skipped.
	OverlapBufferOne
	// OverlapBufferAll starts every time, one after another, each when the
	// run before it ends (at most MaxBuffered waiting; more are skipped).
	OverlapBufferAll
	// OverlapCancelOther cancels the active run and starts the new time.
	OverlapCancelOther
	// OverlapAllowAll starts every time at once, whatever is running.
	OverlapAllowAll
)

// MaxBuffered bounds the times an OverlapBufferAll schedule keeps waiting.
const MaxBuffered = 100

var overlapNames = []string{"skip", "buffer_one", "buffer_all", "cancel_other", "allow_all"}

// String returns the policy's name as the CLI spells it ("buffer_one").
func (o Overlap) String() string {
	if o < 0 || int(o) >= len(overlapNames) {
		return fmt.Sprintf("Overlap(%d)", int(o))
	}
	return overlapNames[o]
}

// ParseOverlap reads a policy name ("skip", "buffer_one", "buffer_all",
// "cancel_other", "allow_all"; "" is skip; case and '-' for '_' are
// forgiven).
func ParseOverlap(s string) (Overlap, error) {
	if s == "" {
		return OverlapSkip, nil
	}
	n := strings.ReplaceAll(strings.ToLower(s), "-", "_")
	for i, name := range overlapNames {
		if n == name {
			return Overlap(i), nil
		}
	}
	return 0, fmt.Errorf("%q is not an overlap policy: one of %s", s, strings.Join(overlapNames, ", "))
}

// Action is what to do with one nominal time that is due.
type Action int

// The actions of Overlap.Decide.
const (
	// ActionStart starts the time's task now.
	ActionStart Action = iota
	// ActionSkip records the time as skipped (SkipReasonOverlap or
	// SkipReasonBufferFull).
	ActionSkip
	// ActionBuffer keeps the time waiting until the active run ends.
	ActionBuffer
	// ActionCancelAndStart cancels the active run, then starts the time.
	ActionCancelAndStart
)

func (a Action) String() string {
	return [...]string{"start", "skip", "buffer", "cancel_and_start"}[a]
}

// Decide returns what to do with a due time under the policy, when running
// says whether a run of the schedule is active and buffered how many times
// already wait. A time is never started ahead of buffered ones: with a
// buffer, it waits behind them (or is skipped when the buffer is full).
func (o Overlap) Decide(running bool, buffered int) Action {
	if o == OverlapAllowAll {
		return ActionStart
	}
	if !running && buffered == 0 {
		return ActionStart
	}
	switch o {
	case OverlapBufferOne:
		if buffered == 0 {
			return ActionBuffer
		}
	case OverlapBufferAll:
		if buffered < MaxBuffered {
			return ActionBuffer
		}
	case OverlapCancelOther:
		return ActionCancelAndStart
	}
	return ActionSkip
}

// Reasons recorded with a skipped time.
const (
	SkipReasonOverlap    = "overlap: the previous run was still running (policy skip)"
	SkipReasonBufferFull = "overlap: the buffer was full"
	SkipReasonCatchUp    = "missed: older than the catch-up window when the firer saw it"
	SkipReasonPaused     = "paused"
)
