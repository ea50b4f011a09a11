package agentsdk

import "context"

// Typed adapts a handler with a typed input and output to a HandlerFunc:
//
//	agent.Handle("payments.charge", agentsdk.Typed(charge))
//
//	func charge(ctx context.Context, s *agentsdk.Step, order Order) (Receipt, error)
//
// In is decoded from the task's input (Step.Input: the JSON form of the
// google.protobuf.Value the task was submitted with; a task without input
// decodes as JSON null, which leaves In its zero value). Input that does not
// decode fails the attempt with a Permanent error of code "bad_input": a
// retry would read the same input. The step's configuration and the outputs
// of the steps it depends on are read with Step.Config and
// Step.DependencyOutput, as in an untyped handler.
//
// Out is the step's output, JSON-encoded as for a HandlerFunc; it is not
// sent when fn returns an error. With Out = any, returning nil sends no
// output; a nil pointer is sent as JSON null.
func Typed[In, Out any](fn func(ctx context.Context, s *Step, in In) (Out, error)) HandlerFunc {
	return func(ctx context.Context, s *Step) (any, error) {
		var in In
		if err := s.Input(&in); err != nil {
			return nil, &Error{Code: "bad_input", Message: err.Error(), NonRetryable: true}
		}
		out, err := fn(ctx, s, in)
		if err != nil {
			return nil, err
		}
		return out, nil
	}
}
