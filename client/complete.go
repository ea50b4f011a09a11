package client

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// Completions from outside: a step that waits (waitFor: external in its
// workflow) or that its agent handed off (agentsdk's Step.Defer) is ended
// by a call here, with an output or an error. By name (Run.CompleteStep,
// Run.FailStep) it needs the admin or approver role of the namespace when
// authorization is on; by token (Client.CompleteByToken,
// Client.FailByToken) any identity the scheduler accepts: the token is
// the capability. A completion is idempotent: the same one sent again
// (after a lost answer) is answered as the first was (Repeated set) and
// changes nothing; another one for a step already completed is refused
// with FAILED_PRECONDITION, reason STEP_COMPLETED_OTHERWISE, and one for a
// step that does not wait (not ready yet, ended, or a replaced attempt's
// token) with reason STEP_NOT_WAITING.

// CompleteStep completes the waiting step named step with output (encoded
// as JSON, nil for null), passed to the steps after it as any step's
// output.
func (r *Run) CompleteStep(ctx context.Context, step string, output any) (*reevev1.CompleteStepResponse, error) {
	o, err := outputOf(output)
	if err != nil {
		return nil, fmt.Errorf("client: complete step %s of task %s: output: %w", step, r.id, err)
	}
	resp, err := r.c.scheduler.CompleteStep(ctx, &reevev1.CompleteStepRequest{Namespace: r.namespace, TaskId: r.id, Step: step, Outcome: o})
	if err != nil {
		return nil, fmt.Errorf("client: complete step %s of task %s: %w", step, r.id, err)
	}
	return resp, nil
}

// FailStep fails the waiting step named step for good with code (required)
// and message: a decision from outside (a rejection). It is not retried:
// the step's escalation applies (a task with compensations is undone).
func (r *Run) FailStep(ctx context.Context, step, code, message string) (*reevev1.CompleteStepResponse, error) {
	resp, err := r.c.scheduler.CompleteStep(ctx, &reevev1.CompleteStepRequest{Namespace: r.namespace, TaskId: r.id, Step: step, Outcome: errorOf(code, message)})
	if err != nil {
		return nil, fmt.Errorf("client: fail step %s of task %s: %w", step, r.id, err)
	}
	return resp, nil
}

// CompletionToken returns the completion token of the waiting step named
// step, to pass on to whoever will complete it (a link in a message). It
// needs the admin or approver role. A secret: do not log it.
func (r *Run) CompletionToken(ctx context.Context, step string) (string, error) {
	resp, err := r.c.scheduler.GetCompletionToken(ctx, &reevev1.GetCompletionTokenRequest{Namespace: r.namespace, TaskId: r.id, Step: step})
	if err != nil {
		return "", fmt.Errorf("client: completion token of step %s of task %s: %w", step, r.id, err)
	}
	return resp.GetToken(), nil
}

// CompleteByToken completes the step attempt token names with output
// (encoded as JSON, nil for null).
func (c *Client) CompleteByToken(ctx context.Context, token string, output any) (*reevev1.CompleteStepResponse, error) {
	o, err := outputOf(output)
	if err != nil {
		return nil, fmt.Errorf("client: complete by token: output: %w", err)
	}
	resp, err := c.scheduler.CompleteStep(ctx, &reevev1.CompleteStepRequest{Token: token, Outcome: o})
	if err != nil {
		return nil, fmt.Errorf("client: complete by token: %w", err)
	}
	return resp, nil
}

// FailByToken fails the step attempt token names for good with code
// (required) and message.
func (c *Client) FailByToken(ctx context.Context, token, code, message string) (*reevev1.CompleteStepResponse, error) {
	resp, err := c.scheduler.CompleteStep(ctx, &reevev1.CompleteStepRequest{Token: token, Outcome: errorOf(code, message)})
	if err != nil {
		return nil, fmt.Errorf("client: fail by token: %w", err)
	}
	return resp, nil
}

func outputOf(v any) (*reevev1.CompleteStepRequest_Output, error) {
	pv, err := encode(v)
	if err != nil {
		return nil, err
	}
	if pv == nil {
		pv = structpb.NewNullValue()
	}
	return &reevev1.CompleteStepRequest_Output{Output: pv}, nil
}

func errorOf(code, message string) *reevev1.CompleteStepRequest_Error {
	return &reevev1.CompleteStepRequest_Error{Error: &reevev1.CompletionError{Code: code, Message: message}}
}

// WaitingSteps lists the steps of the Client's namespace that wait for a
// completion from outside (WAITING, or deferred by their agent), oldest
// first, a page at a time: pass "" as pageToken first, then the next token
// it returned, until that is "". It needs the client, approver or admin
// role of the namespace.
func (c *Client) WaitingSteps(ctx context.Context, pageToken string) (steps []*reevev1.WaitingStep, next string, err error) {
	resp, err := c.scheduler.ListWaitingSteps(ctx, &reevev1.ListWaitingStepsRequest{Namespace: c.namespace, PageToken: pageToken})
	if err != nil {
		return nil, "", fmt.Errorf("client: list waiting steps: %w", err)
	}
	return resp.GetSteps(), resp.GetNextPageToken(), nil
}
