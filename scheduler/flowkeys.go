package scheduler

import (
	"fmt"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/celkey"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// maxFairnessKeyBytes bounds a fairness key (SubmitTaskRequest.fairness_key).
const maxFairnessKeyBytes = 63

// flowKeys computes, at submission, the keys a task's workflow derives
// from its input with CEL (internal/celkey; the expressions were checked
// when the workflow was validated): each step's concurrency key
// (Step.concurrency_key), the workflow's (Task.concurrency_key), and the
// fairness key when the submission names none (Task.fairness_key). An
// input the expression cannot evaluate (a missing field) is refused naming
// input and the expression's field.
func flowKeys(t *reevev1.Task, req *reevev1.SubmitTaskRequest) error {
	wf := t.GetWorkflow()
	eval := func(field, expr string) (string, error) {
		p, err := celkey.Compile(expr)
		if err != nil {
			return "", &workflow.FieldError{Field: field, Reason: err.Error()}
		}
		key, err := p.Key(t.GetInput())
		if err != nil {
			return "", &workflow.FieldError{Field: "input", Reason: fmt.Sprintf("%s %q: %v", workflow.FilePath(field), expr, err)}
		}
		return key, nil
	}
	for i, spec := range wf.GetSteps() {
		c := spec.GetConcurrency()
		if c == nil {
			continue
		}
		key, err := eval(fmt.Sprintf("workflow.steps[%d].concurrency.key", i), c.GetKey())
		if err != nil {
			return err
		}
		if st := taskstate.FindStep(t, spec.GetName()); st != nil {
			st.ConcurrencyKey = key
		}
	}
	if c := wf.GetConcurrency(); c != nil {
		key, err := eval("workflow.concurrency.key", c.GetKey())
		if err != nil {
			return err
		}
		t.ConcurrencyKey = key
	}
	switch {
	case req.GetFairnessKey() != "":
		t.FairnessKey = req.GetFairnessKey()
	case wf.GetFairnessKey() != "":
		key, err := eval("workflow.fairness_key", wf.GetFairnessKey())
		if err != nil {
			return err
		}
		if len(key) > maxFairnessKeyBytes {
			return &workflow.FieldError{Field: "input", Reason: fmt.Sprintf("workflow.fairnessKey %q gives a key of %d bytes, more than %d", wf.GetFairnessKey(), len(key), maxFairnessKeyBytes)}
		}
		t.FairnessKey = key
	}
	return nil
}
