package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"

	"github.com/reeve-org/reeve/internal/chaos/workload"
)

// Report is the outcome of a run, printed as a table and written as JSON.
type Report struct {
	Seed      uint64 `json:"seed"`
	Tasks     int    `json:"tasks"`
	Submitted int    `json:"submitted"`
	// States counts tasks by final state (SUCCEEDED, COMPENSATED, ...).
	States map[string]int `json:"states"`
	// Archived: tasks the checks read from the archive (they had moved
	// there during the run; Config.ArchiveDSN).
	Archived       int `json:"archived"`
	DesignedToFail int `json:"designed_to_fail"`
	// OperatorCancels: tasks an operator canceled at a random point
	// (CancelTask while queued, running, compensating or already ended).
	OperatorCancels int `json:"operator_cancels"`
	// OperatorCompensations: tasks an operator compensated at a random
	// point (CompensateTask without a fence; refused once the task ended);
	// CompensatedByOperator of them ended COMPENSATED.
	OperatorCompensations int `json:"operator_compensations"`
	// Pauses: tasks an operator paused at a random point (and resumed
	// later); nothing of them may be dispatched while paused.
	Pauses int `json:"pauses"`
	// BatchPauses: of them, the tasks a batch job paused (and a second one
	// resumed).
	BatchPauses           int `json:"batch_pauses"`
	CompensatedByOperator int `json:"compensated_by_operator"`
	CompensatedByFaults   int `json:"compensated_by_faults"`
	// RetryTasks: tasks designed to end FAILED (their fail step fails for
	// good in its first round) for an operator to retry; TasksRetried of
	// them were retried (RetryStep accepted) and RetriedSucceeded of those
	// ended SUCCEEDED; RetryNotNeeded succeeded in their first round (faults
	// took attempts without failures: the fail step's attempt passed its
	// failing ones). RetriesAccepted and RetriesRefused count the operators'
	// RetryStep calls answered OK and FAILED_PRECONDITION;
	// RetriesRefusedAtWrongPoints those refused that were made while the
	// task ran, on a step not FAILED, or after the task SUCCEEDED.
	RetryTasks                  int `json:"retry_tasks"`
	TasksRetried                int `json:"tasks_retried"`
	RetriedSucceeded            int `json:"retried_succeeded"`
	RetryNotNeeded              int `json:"retry_not_needed"`
	RetriesAccepted             int `json:"retries_accepted"`
	RetriesRefused              int `json:"retries_refused"`
	RetriesRefusedAtWrongPoints int `json:"retries_refused_at_wrong_points"`
	// RetriesAppliedThenRefused: retries of a failed step whose answer a
	// fault lost; re-sent, they were refused because the first call had
	// been applied (the task had moved on). Counted as accepted: RetryStep
	// without a fence is not idempotent.
	RetriesAppliedThenRefused int `json:"retries_applied_then_refused"`
	// WideTasks ran the wide workflow (64 parallel steps and a join);
	// WideStates counts them by final state; WideHistoryPaged: those whose
	// history outgrew the record and was put together from its versions.
	WideTasks        int            `json:"wide_tasks"`
	WideStates       map[string]int `json:"wide_states"`
	WideHistoryPaged int            `json:"wide_history_paged"`
	// FailedWithAlert: tasks that were FAILED at some point, each with an
	// alert.
	FailedWithAlert int `json:"failed_with_alert"`
	// Faults counts injected faults by kind; FaultLog lists them in order.
	Faults         map[string]int `json:"faults"`
	FaultsTotal    int            `json:"faults_total"`
	FaultLog       []string       `json:"fault_log"`
	InjectorErrors []string       `json:"injector_errors,omitempty"`
	// FaultPhase is how long faults were injected (s); DrainAfterLastFault
	// the time from the end of the last fault to every task ended (s).
	FaultPhase          float64 `json:"fault_phase_s"`
	DrainAfterLastFault float64 `json:"drain_after_last_fault_s"`
	// Recoveries are supervisor actions on expired executions; retries
	// scheduled include those after agent errors.
	Recoveries       int `json:"recoveries"`
	RetriesScheduled int `json:"retries_scheduled"`
	Compensations    int `json:"compensations"`
	// SideEffects logged by agents; Repeated: executions of the same
	// (idempotency key, attempt) more than once; Torn: lines cut by SIGKILL.
	SideEffects         int `json:"side_effects"`
	SideEffectsRepeated int `json:"side_effects_repeated"`
	SideEffectsTorn     int `json:"side_effects_torn"`
	Samples             int `json:"samples"`
	SamplesFailed       int `json:"samples_failed"`
	MaxRunningSeen      int `json:"max_running_seen"`
	// Waits: work that waits (issue 35; waits.go).
	Waits WaitReport `json:"waits"`

	Violations []Violation `json:"violations"`
}

// Violation is one broken invariant.
type Violation struct {
	Invariant string `json:"invariant"`
	Task      string `json:"task,omitempty"`
	Step      string `json:"step,omitempty"`
	Attempt   int32  `json:"attempt,omitempty"`
	Detail    string `json:"detail"`
}

func (r *Report) add(v Violation) { r.Violations = append(r.Violations, v) }

func (r *Report) violate(invariant, task, detail string) {
	r.add(Violation{Invariant: invariant, Task: task, Detail: detail})
}

// OK reports whether no invariant was violated.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteTable prints the report; at most maxViolations violations are listed.
func (r *Report) WriteTable(w io.Writer, maxViolations int) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("seed", r.Seed)
	row("tasks submitted", fmt.Sprintf("%d of %d", r.Submitted, r.Tasks))
	for _, k := range sortedKeys(r.States) {
		row("  ended "+k, r.States[k])
	}
	row("read from the archive (moved there during the run)", r.Archived)
	row("designed to fail and compensate", r.DesignedToFail)
	row("canceled by an operator at a random point", r.OperatorCancels)
	row("compensated by an operator at a random point", r.OperatorCompensations)
	row("paused by an operator at a random point, then resumed", r.Pauses)
	row("of them paused and resumed by batch jobs", r.BatchPauses)
	row("  of which ended COMPENSATED", r.CompensatedByOperator)
	row("compensated after faults exhausted retries", r.CompensatedByFaults)
	row("designed to end FAILED for an operator retry", r.RetryTasks)
	row("  retried by an operator (RetryStep accepted)", r.TasksRetried)
	row("  of which ended SUCCEEDED", r.RetriedSucceeded)
	row("  succeeded in their first round (no retry needed)", r.RetryNotNeeded)
	row("RetryStep calls accepted / refused", fmt.Sprintf("%d / %d", r.RetriesAccepted, r.RetriesRefused))
	row("  refused at a wrong point (running, not FAILED, SUCCEEDED)", r.RetriesRefusedAtWrongPoints)
	row("  applied, answer lost, re-sent and refused (counted accepted)", r.RetriesAppliedThenRefused)
	row("tasks that were FAILED, each with an alert", r.FailedWithAlert)
	row(fmt.Sprintf("wide tasks (%d parallel steps and a join)", workload.WideWidth), r.WideTasks)
	for _, k := range sortedKeys(r.WideStates) {
		row("  ended "+k, r.WideStates[k])
	}
	row("  history put together from record versions", r.WideHistoryPaged)
	r.writeWaits(row)
	row("faults injected", r.FaultsTotal)
	for _, k := range sortedKeys(r.Faults) {
		row("  "+k, r.Faults[k])
	}
	row("fault phase", fmt.Sprintf("%.1fs", r.FaultPhase))
	row("last fault to full drain", fmt.Sprintf("%.1fs", r.DrainAfterLastFault))
	row("supervisor recoveries (expired executions)", r.Recoveries)
	row("retries scheduled", r.RetriesScheduled)
	row("compensations performed", r.Compensations)
	row("side effects logged", r.SideEffects)
	row("  re-executions (same key and attempt)", r.SideEffectsRepeated)
	row("  lines torn by SIGKILL", r.SideEffectsTorn)
	row("etcd samples (failed reads)", fmt.Sprintf("%d (%d)", r.Samples, r.SamplesFailed))
	row("most steps running at a sample", r.MaxRunningSeen)
	row("injector errors", len(r.InjectorErrors))
	row("VIOLATIONS", len(r.Violations))
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, v := range r.Violations {
		if i == maxViolations {
			fmt.Fprintf(w, "... and %d more (see the JSON report)\n", len(r.Violations)-i)
			break
		}
		fmt.Fprintf(w, "  [%s] task %s step %s attempt %d: %s\n", v.Invariant, v.Task, v.Step, v.Attempt, v.Detail)
	}
	for _, e := range r.InjectorErrors {
		fmt.Fprintf(w, "  injector error: %s\n", e)
	}
	return nil
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
