package workflow

import "fmt"

// FieldError is a validation failure of one field.
type FieldError struct {
	// Field is the path of the field, e.g. "workflow.steps[1].depends_on[0]".
	Field string
	// Reason says what is wrong.
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
