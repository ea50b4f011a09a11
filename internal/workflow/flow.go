package workflow

import (
	"fmt"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/celkey"
)

// MaxConcurrency bounds ConcurrencySpec.max_running.
const MaxConcurrency = 1_000_000

// validateFlow checks a workflow's flow control (issue 36): its
// concurrency keys and fairness key, CEL expressions over the task's input
// compiled and type-checked here (internal/celkey), with errors naming the
// field and the line and column in the expression.
func validateFlow(field string, w *reevev1.Workflow) error {
	if c := w.GetConcurrency(); c != nil {
		if err := validateConcurrency(field+".concurrency", c); err != nil {
			return err
		}
	}
	if fk := w.GetFairnessKey(); fk != "" {
		if _, err := celkey.Compile(fk); err != nil {
			return fieldErr(field+".fairness_key", "%v", err)
		}
	}
	for i, s := range w.GetSteps() {
		if c := s.GetConcurrency(); c != nil {
			if err := validateConcurrency(fmt.Sprintf("%s.steps[%d].concurrency", field, i), c); err != nil {
				return err
			}
		}
	}
	return nil
}

func validateConcurrency(field string, c *reevev1.ConcurrencySpec) error {
	if _, err := celkey.Compile(c.GetKey()); err != nil {
		return fieldErr(field+".key", "%v", err)
	}
	if m := c.GetMaxRunning(); m < 1 || m > MaxConcurrency {
		return fieldErr(field+".max_running", "%d; must be 1 to %d", m, MaxConcurrency)
	}
	return nil
}
