package scheduler

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// Completion tokens (issue 35). A token names one attempt of one step and
// proves that whoever holds it was given it:
//
//	"rvt1." + base64url(payload || mac)
//	payload = uvarint len, namespace | uvarint len, task id | uvarint len, step | uvarint attempt
//	mac     = HMAC-SHA256(cluster key, "reeve completion token v1" 0x00 || payload || task create time, unix ns, 8 bytes big-endian)
//
// The cluster key is 32 random bytes kept in etcd (meta/completion-key,
// created once: store.CompletionKey), the same for every scheduler. Nothing
// secret is in a task record: a token is derived again from the record
// whenever it is needed (an assignment), and verified against the record it
// names, so no index is needed and nothing has to be stripped from what
// clients read. The mac is 256 bits no one can compute without the key
// (more than the 128 random bits asked for); it covers the task's create
// time, so a token of a task that was deleted does not complete a later
// task of the same id, and the attempt, so a token of a replaced attempt
// completes nothing. Tokens are never logged: only the ref they name is.
const tokenPrefix = "rvt1."

// tokenMACDomain separates the token's mac from any other use of the key.
const tokenMACDomain = "reeve completion token v1\x00"

// maxTokenLen bounds a token a request may carry.
const maxTokenLen = 1024

// completionTokens holds the cluster key, loaded from etcd once.
type completionTokens struct {
	store *store.Store
	mu    sync.Mutex // serializes loads
	key   atomic.Pointer[[]byte]
}

// load returns the key, reading (or creating) it in etcd on first use.
func (c *completionTokens) load(ctx context.Context) ([]byte, error) {
	if k := c.key.Load(); k != nil {
		return *k, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := c.key.Load(); k != nil {
		return *k, nil
	}
	k, err := c.store.CompletionKey(ctx)
	if err != nil {
		return nil, err
	}
	c.key.Store(&k)
	return k, nil
}

// forStep returns the token of st's current attempt in t, or "" when the
// execution is a compensation (never completed from outside) or the key
// cannot be read (etcd unavailable: the agent then cannot defer the
// attempt). Run loads the key before it dispatches; an agent may be served
// before, and the first assignment then reads it (once per process).
func (c *completionTokens) forStep(t *reevev1.Task, st *reevev1.Step) string {
	if taskstate.Compensating(st) || st.GetCompensation() {
		return ""
	}
	k, err := c.load(context.Background()) // bounded by the store's operation timeout
	if err != nil {
		return ""
	}
	return makeToken(k, t, st.GetName(), st.GetAttempt())
}

func tokenPayload(ns, id, step string, attempt int32) []byte {
	b := make([]byte, 0, 3*binary.MaxVarintLen64+len(ns)+len(id)+len(step)+binary.MaxVarintLen32)
	for _, s := range []string{ns, id, step} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return binary.AppendUvarint(b, uint64(attempt))
}

func tokenMAC(key, payload []byte, created time.Time) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(tokenMACDomain))
	m.Write(payload)
	var ct [8]byte
	binary.BigEndian.PutUint64(ct[:], uint64(created.UnixNano()))
	m.Write(ct[:])
	return m.Sum(nil)
}

func makeToken(key []byte, t *reevev1.Task, step string, attempt int32) string {
	p := tokenPayload(t.GetNamespace(), t.GetId(), step, attempt)
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(append(p, tokenMAC(key, p, t.GetCreateTime().AsTime())...))
}

// tokenRef is what a token names, read before its mac is checked (which
// needs the task's create time).
type tokenRef struct {
	ns, id, step string
	attempt      int32
	payload, mac []byte
}

// errBadToken is every refusal of a token that is not one of ours: the
// same answer whatever is wrong with it (malformed, forged, of a task that
// does not exist), so that it reveals nothing.
var errBadToken = refuse(codes.PermissionDenied, ReasonInvalidCompletionToken, "token: not a valid completion token")

// parseToken reads a token's ref; the mac is checked by verify.
func parseToken(tok string) (tokenRef, error) {
	rest, ok := strings.CutPrefix(tok, tokenPrefix)
	if !ok || len(tok) > maxTokenLen {
		return tokenRef{}, errBadToken
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(b) < sha256.Size {
		return tokenRef{}, errBadToken
	}
	p, mac := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	var r tokenRef
	rd := p
	var parts [3]string
	for i := range parts {
		n, k := binary.Uvarint(rd)
		if k <= 0 || n > uint64(len(rd)-k) {
			return tokenRef{}, errBadToken
		}
		parts[i] = string(rd[k : k+int(n)])
		rd = rd[k+int(n):]
	}
	a, k := binary.Uvarint(rd)
	if k <= 0 || k != len(rd) || a == 0 || a > 1<<31-1 {
		return tokenRef{}, errBadToken
	}
	r.ns, r.id, r.step, r.attempt = parts[0], parts[1], parts[2], int32(a)
	r.payload, r.mac = p, mac
	if workflow.ValidateNamespace("namespace", r.ns) != nil || r.ns == "" || workflow.ValidateTaskID("task_id", r.id) != nil || r.id == "" || workflow.ValidateName("step", r.step) != nil {
		return tokenRef{}, errBadToken
	}
	return r, nil
}

// verify reports whether r's mac is the one key gives for t (constant
// time).
func (r tokenRef) verify(key []byte, t *reevev1.Task) bool {
	return t.GetCreateTime() != nil && hmac.Equal(r.mac, tokenMAC(key, r.payload, t.GetCreateTime().AsTime()))
}

// ErrorInfo reasons of completions from outside (docs/errors.md).
const (
	// PERMISSION_DENIED: the token is not one this cluster gave (malformed,
	// forged, or of a task that no longer exists).
	ReasonInvalidCompletionToken = "INVALID_COMPLETION_TOKEN"
	// FAILED_PRECONDITION: the step, or the token's attempt, does not wait
	// for a completion (not ready yet, ended, replaced by a later attempt,
	// running on an agent that did not hand it off).
	ReasonStepNotWaiting = "STEP_NOT_WAITING"
	// FAILED_PRECONDITION: the attempt was already completed from outside
	// with another output or error.
	ReasonCompletedOtherwise = "STEP_COMPLETED_OTHERWISE"
	// FAILED_PRECONDITION: an agent asked to defer an execution that cannot
	// be handed off (a compensation, or one sent without a token).
	ReasonStepNotDeferrable = "STEP_NOT_DEFERRABLE"
)

// errRepeated aborts the write of a completion found Repeated: nothing
// changes, and the first answer is given again.
var errRepeated = errors.New("scheduler: completion repeated")

// CompleteStep implements SchedulerService: a completion from outside, by
// token or by name, in one task write fenced by the step's attempt.
func (svc *schedulerService) CompleteStep(ctx context.Context, req *reevev1.CompleteStepRequest) (*reevev1.CompleteStepResponse, error) {
	ns, id, step, c, byToken, err := completionOf(req)
	if err != nil {
		return nil, statusErr(err)
	}
	var tr tokenRef
	if byToken {
		tr, err = parseToken(req.GetToken())
		if err != nil {
			return nil, statusErr(err)
		}
		switch {
		case req.GetNamespace() != "" && req.GetNamespace() != tr.ns:
			return nil, statusErr(refuse(codes.PermissionDenied, ReasonInvalidCompletionToken, "namespace: the token is of another namespace than %q", req.GetNamespace()))
		case (req.GetTaskId() != "" && req.GetTaskId() != tr.id) || (req.GetStep() != "" && req.GetStep() != tr.step):
			return nil, statusErr(refuse(codes.InvalidArgument, ReasonInvalidField, "token: it names another task or step than task_id and step"))
		}
		ns, id, step, c.Attempt = tr.ns, tr.id, tr.step, tr.attempt
	}
	key, err := svc.eng.tokens.load(ctx)
	if err != nil {
		return nil, statusErr(err)
	}
	answer := func(t *reevev1.Task, repeated bool) *reevev1.CompleteStepResponse {
		s := taskstate.FindStep(t, step)
		return &reevev1.CompleteStepResponse{
			Ref:      &reevev1.StepRef{Namespace: ns, TaskId: id, Step: step, Attempt: s.GetCompletionAttempt()},
			State:    s.GetCompletionState(),
			Repeated: repeated,
		}
	}
	// judge refuses what the caller may not do to t, and answers a repeat.
	judge := func(t *reevev1.Task) error {
		if byToken && !tr.verify(key, t) {
			return errBadToken
		}
		s := taskstate.FindStep(t, step)
		if s == nil {
			return fmt.Errorf("task %s has no step %q: %w", id, step, taskstate.ErrUnknownStep)
		}
		if taskstate.Repeated(t, s, c) {
			return errRepeated
		}
		return nil
	}
	c.Actor = completionActor(ctx, byToken)
	w, err := svc.eng.update(ctx, taskWrite{ns: ns, id: id, claim: "claim with a completion",
		change: func(t *reevev1.Task, now time.Time, claim *writeClaim) (effects, error) {
			if err := judge(t); err != nil {
				return effects{}, err
			}
			err := claim.run(t, "", now, func() error {
				if err := taskstate.CompleteFromOutside(t, step, c, now); err != nil {
					return err
				}
				return outputFits(t, c)
			})
			return effects{revoke: "step completed from outside", completed: step, byToken: byToken}, err
		}})
	switch {
	case errors.Is(err, errRepeated):
		return answer(w.before.GetTask(), true), nil
	case store.IsNotFound(err):
		// Ended and moved to the archive: a repeat is answered from there.
		rec, aerr := svc.eng.archivedRecord(ctx, ns, id, err)
		if aerr != nil {
			if byToken {
				return nil, statusErr(errBadToken)
			}
			return nil, statusErr(aerr)
		}
		if err := judge(rec.GetTask()); errors.Is(err, errRepeated) {
			return answer(rec.GetTask(), true), nil
		} else if err != nil {
			return nil, statusErr(err)
		}
		// Refused as the task in etcd would be (another completion of a
		// completed attempt is STEP_COMPLETED_OTHERWISE, anything else
		// TASK_TERMINAL): the archived record is terminal, so this changes
		// nothing but a copy.
		if err := taskstate.CompleteFromOutside(proto.CloneOf(rec.GetTask()), step, c, time.Now()); err != nil {
			return nil, statusErr(err)
		}
		return nil, statusErr(fmt.Errorf("%w: task %q ended and was moved to the archive", taskstate.ErrTerminal, id))
	case err != nil:
		return nil, statusErr(err)
	}
	svc.log.InfoContext(ctx, "step completed from outside", "task_id", id, "namespace", ns, "step", step, "attempt", taskstate.FindStep(w.after.GetTask(), step).GetCompletionAttempt(), "by_token", byToken)
	return answer(w.after.GetTask(), false), nil
}

// outputFits refuses (and so changes nothing: the step still waits, to be
// completed with less or with an error) a completion whose output took
// the task record past MaxTaskRecordBytes, measured as an agent's output is
// (results.go): the record could not be written.
func outputFits(t *reevev1.Task, c taskstate.Completion) error {
	if c.Output == nil {
		return nil
	}
	if size := proto.Size(t); size > MaxTaskRecordBytes {
		return &workflow.FieldError{Field: "output", Reason: fmt.Sprintf(
			"%d bytes do not fit the task record (it would be %d bytes, the limit is %d): complete the step with a smaller output, or with an error",
			proto.Size(c.Output), size, MaxTaskRecordBytes)}
	}
	return nil
}

// completionOf validates a CompleteStepRequest: a token, or a namespace,
// task and step; an output or an error with a code.
func completionOf(req *reevev1.CompleteStepRequest) (ns, id, step string, c taskstate.Completion, byToken bool, err error) {
	byToken = req.GetToken() != ""
	if byToken {
		if err := workflow.ValidateNamespace("namespace", req.GetNamespace()); err != nil {
			return "", "", "", c, false, err
		}
	} else {
		if ns, err = taskKey(req.GetNamespace(), req.GetTaskId()); err != nil {
			return "", "", "", c, false, err
		}
		if req.GetStep() == "" {
			return "", "", "", c, false, &workflow.FieldError{Field: "step", Reason: "required (or complete by token)"}
		}
		if err := workflow.ValidateName("step", req.GetStep()); err != nil {
			return "", "", "", c, false, err
		}
		id, step = req.GetTaskId(), req.GetStep()
	}
	switch o := req.GetOutcome().(type) {
	case *reevev1.CompleteStepRequest_Output:
		if o.Output == nil {
			o.Output = structpb.NewNullValue()
		}
		if err := workflow.ValidateValue("output", o.Output, workflow.MaxOutputBytes); err != nil {
			return "", "", "", c, false, err
		}
		c.Output = o.Output
	case *reevev1.CompleteStepRequest_Error:
		e := o.Error
		switch {
		case e.GetCode() == "":
			return "", "", "", c, false, &workflow.FieldError{Field: "error.code", Reason: "required: the code of the decision (e.g. rejected), matched by nothing: the step fails for good"}
		case len(e.GetCode()) > workflow.MaxNameLen:
			return "", "", "", c, false, &workflow.FieldError{Field: "error.code", Reason: fmt.Sprintf("longer than %d characters", workflow.MaxNameLen)}
		case len(e.GetMessage()) > workflow.MaxErrorMessageBytes:
			return "", "", "", c, false, &workflow.FieldError{Field: "error.message", Reason: fmt.Sprintf("longer than %d bytes", workflow.MaxErrorMessageBytes)}
		}
		c.Error = &reevev1.StepError{Code: e.GetCode(), Message: e.GetMessage()}
	default:
		return "", "", "", c, false, &workflow.FieldError{Field: "output", Reason: "required: an output (the step succeeded) or an error (it failed)"}
	}
	return ns, id, step, c, byToken, nil
}

// completionActor is who completed a step, for the history: the caller's
// identity with authorization on, and whether it held the token.
func completionActor(ctx context.Context, byToken bool) string {
	if byToken {
		return actorOf(ctx, "token")
	}
	return actorOf(ctx, "approver")
}

// GetCompletionToken implements SchedulerService: the token of a waiting
// step's current attempt, for those who may complete it by name.
func (svc *schedulerService) GetCompletionToken(ctx context.Context, req *reevev1.GetCompletionTokenRequest) (*reevev1.GetCompletionTokenResponse, error) {
	ns, err := taskKey(req.GetNamespace(), req.GetTaskId())
	if err != nil {
		return nil, statusErr(err)
	}
	if err := workflow.ValidateName("step", req.GetStep()); err != nil {
		return nil, statusErr(err)
	}
	key, err := svc.eng.tokens.load(ctx)
	if err != nil {
		return nil, statusErr(err)
	}
	rec, err := svc.eng.getTask(ctx, ns, req.GetTaskId())
	if err != nil {
		return nil, statusErr(err)
	}
	t := rec.GetTask()
	s := taskstate.FindStep(t, req.GetStep())
	switch {
	case s == nil:
		return nil, statusErr(fmt.Errorf("task %s has no step %q: %w", t.GetId(), req.GetStep(), taskstate.ErrUnknownStep))
	case !taskstate.TerminalTask(t.GetState()) && taskstate.Sleeping(t, s):
		return nil, statusErr(refuse(codes.FailedPrecondition, ReasonStepNotWaiting, "step %q of task %s is a sleep: it ends by itself and has no completion token", s.GetName(), t.GetId()))
	case taskstate.TerminalTask(t.GetState()) || !taskstate.Awaiting(t, s):
		return nil, statusErr(refuse(codes.FailedPrecondition, ReasonStepNotWaiting, "step %q of task %s is %s: it does not wait for a completion", s.GetName(), t.GetId(), taskstate.StateName(s.GetState())))
	}
	return &reevev1.GetCompletionTokenResponse{
		Ref:        taskstate.Ref(t, s),
		Token:      makeToken(key, t, s.GetName(), s.GetAttempt()),
		CompleteBy: s.GetCompleteBy(),
	}, nil
}

// ListWaitingSteps implements SchedulerService: the namespace's steps that
// wait for a completion from outside, from the waiting index (no task is
// read).
func (svc *schedulerService) ListWaitingSteps(ctx context.Context, req *reevev1.ListWaitingStepsRequest) (*reevev1.ListWaitingStepsResponse, error) {
	if err := workflow.ValidateNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, statusErr(err)
	}
	ns := workflow.Namespace(req.GetNamespace())
	size := int(req.GetPageSize())
	switch {
	case size < 0 || size > 1000:
		return nil, statusErr(&workflow.FieldError{Field: "page_size", Reason: fmt.Sprintf("%d is outside [0, 1000] (0 means 100)", size)})
	case size == 0:
		size = 100
	}
	var after string
	if tok := req.GetPageToken(); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || len(b) == 0 || len(b) > 512 {
			return nil, statusErr(&workflow.FieldError{Field: "page_token", Reason: "not a page token of ListWaitingSteps"})
		}
		after = string(b)
	}
	steps, next, err := svc.store.WaitingSteps(ctx, ns, after, size)
	if err != nil {
		return nil, statusErr(err)
	}
	resp := &reevev1.ListWaitingStepsResponse{}
	for _, w := range steps {
		resp.Steps = append(resp.Steps, &reevev1.WaitingStep{
			Ref:           &reevev1.StepRef{Namespace: w.Namespace, TaskId: w.TaskID, Step: w.Step, Attempt: w.Attempt},
			Workflow:      w.Workflow,
			WaitStartTime: timestamppb.New(w.Since),
			CompleteBy:    timestamppb.New(w.CompleteBy),
			Deferred:      w.Deferred,
		})
	}
	if next != "" {
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(next))
	}
	return resp, nil
}
