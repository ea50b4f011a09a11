// Package workflow validates what clients and agents send (workflow
// definitions, task submissions, agent registrations and results) and holds
// the limits and the retry, timeout and escalation policy with their
// defaults. It is pure: no I/O.
//
// A validation failure is a *FieldError whose message names the field path
// and the reason, with a suggestion when a name looks misspelled, e.g.
// `workflow.steps[2].dependsOn[0]: unknown step "create_biling"; did you
// mean "create_billing"?`: the fields inside a workflow are spelled as a
// workflow file (and protojson) spells them, while FieldError.Field keeps
// the proto's path (workflow.steps[2].depends_on[0]) for the
// google.rpc.BadRequest of the scheduler's INVALID_ARGUMENT.
package workflow
