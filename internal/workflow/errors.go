package workflow

import "fmt"

// FieldError is a validation failure of one field.
type FieldError struct {
	// Field is the path of the field with the proto's names, e.g.
	// "workflow.steps[1].depends_on[0]" (a google.rpc.BadRequest's field).
	Field string
	// Reason says what is wrong, with a suggestion when there is one.
	Reason string
}

// Error is "path: reason", the path of a field inside a workflow spelled as
// a workflow file spells it (FilePath: "workflow.steps[1].dependsOn[0]").
func (e *FieldError) Error() string { return FilePath(e.Field) + ": " + e.Reason }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
