// Package workflow validates what clients and agents send (workflow
// definitions, task submissions, agent registrations and results) and holds
// the limits and the retry, timeout and escalation policy with their
// defaults. It is pure: no I/O.
//
// A validation failure is a *FieldError whose message names the field path
// and the reason, e.g. `workflow.steps[2].depends_on[0]: unknown step "x"`;
// the scheduler returns it as INVALID_ARGUMENT.
package workflow
