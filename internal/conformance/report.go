package conformance

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Outcomes of a case.
const (
	Pass = "PASS"
	Fail = "FAIL"
	Skip = "SKIP"
)

// Report is the outcome of a conformance run; its JSON is what
// `reeve conformance -o json` prints.
type Report struct {
	// Address is where the suite served the agent protocol.
	Address string `json:"address"`
	// AgentID and StepTypes are from the agent's first Register.
	AgentID   string   `json:"agent_id"`
	StepTypes []string `json:"step_types"`
	// Passed is true when no case failed (skipped cases do not fail a run).
	Passed bool         `json:"passed"`
	Cases  []CaseResult `json:"cases"`
}

// CaseResult is the outcome of one case.
type CaseResult struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Result is PASS, FAIL or SKIP.
	Result     string `json:"result"`
	DurationMS int64  `json:"duration_ms"`
	// Failures says what the agent did wrong, one entry per violation.
	Failures []string `json:"failures,omitempty"`
	// Skipped says why the case did not run.
	Skipped string `json:"skipped,omitempty"`
}

// WriteTable prints the report for people: one line per case, then the
// failures.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "agent %q (step types %s) on %s\n\n", r.AgentID, strings.Join(r.StepTypes, ","), r.Address)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tRESULT\tTIME\tCHECKS")
	for _, c := range r.Cases {
		fmt.Fprintf(tw, "%s\t%s\t%.1fs\t%s\n", c.Name, c.Result, float64(c.DurationMS)/1000, c.Description)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	failed, skipped := 0, 0
	for _, c := range r.Cases {
		switch c.Result {
		case Fail:
			failed++
			fmt.Fprintf(w, "\n%s:\n", c.Name)
			for _, f := range c.Failures {
				fmt.Fprintf(w, "  - %s\n", f)
			}
		case Skip:
			skipped++
			fmt.Fprintf(w, "\n%s skipped: %s\n", c.Name, c.Skipped)
		}
	}
	verdict := "PASS"
	if !r.Passed {
		verdict = "FAIL"
	}
	_, err := fmt.Fprintf(w, "\n%s: %d passed, %d failed, %d skipped\n", verdict, len(r.Cases)-failed-skipped, failed, skipped)
	return err
}
