package conformance

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// testCase is one scripted exchange with the agent.
type testCase struct {
	name, desc string
	run        func(d *driver, c *caseRun) error
}

// Timing of the cases. Generous where a slow agent must not fail, tight
// where the protocol sets the bound.
const (
	reconnectTimeout = 10 * time.Second // agent reconnects after a break or drain
	ackTimeout       = 5 * time.Second  // AssignmentAck after an assignment
	resultTimeout    = 10 * time.Second // result of an echo step
	lateResultWait   = 800 * time.Millisecond
)

var cases = []testCase{
	{"register", "first message is a valid Register listing " + StepType, caseRegister},
	{"assignment", "assignment acked, run with its input, attempt, idempotency key and dependency outputs; one result", caseAssignment},
	{"error-result", "a failed step is reported as StepResult.error (code, message, non_retryable)", caseErrorResult},
	{"deadline-passed", "no result for an execution whose complete_by passed before or while it ran", caseDeadline},
	{"cancel", "no result for an execution taken away by CancelStep", caseCancel},
	{"stale-attempt", "the next attempt of a step is reported under its own attempt; the expired one never", caseStaleAttempt},
	{"refused-result", "a result refused with FAILED_PRECONDITION is dropped: not resent, not listed as running", caseRefusedResult},
	{"redelivery", "a result whose stream broke before its ResultAck is listed in Register.running and sent again", caseRedelivery},
	{"drain", "on Drain the agent closes the stream, reconnects, and reports the running step on the new stream", caseDrain},
	{"unknown-message", "a message kind and a field from a newer scheduler are ignored: the agent keeps its stream and runs the step", caseUnknownMessage},
	{"heartbeat", "an execution with heartbeat_timeout is heartbeated at least that often until its result", caseHeartbeat},
	{"shutdown", "on SIGTERM the agent sends Drain, reports its running step, closes the stream and exits 0", caseShutdown},
}

// ready returns once an agent is registered on a live stream.
func (d *driver) ready(c *caseRun) error {
	if d.reg == nil && c.name != "register" {
		return c.fatalf("no agent registered")
	}
	if _, err := d.session(reconnectTimeout); err != nil {
		return c.fatalf("%v", err)
	}
	return nil
}

func caseRegister(d *driver, c *caseRun) error {
	if _, err := d.session(d.s.cfg.ConnectTimeout); err != nil {
		return c.fatalf("%v", err)
	}
	if !slices.Contains(d.reg.GetStepTypes(), StepType) {
		return c.fatalf("register.step_types %v does not list %q", d.reg.GetStepTypes(), StepType)
	}
	if d.reg.GetProtocolVersion() < int32(reevev1.ProtocolVersion_PROTOCOL_VERSION_1) {
		c.errorf("register.protocol_version is %d; send the version the agent speaks (1)", d.reg.GetProtocolVersion())
	}
	if d.reg.GetSdk().GetName() == "" {
		c.errorf("register.sdk.name is empty; name the agent's implementation")
	}
	// Nothing is due from the agent until it is assigned work.
	return d.quiet(200 * time.Millisecond)
}

func caseAssignment(d *driver, c *caseRun) error {
	if err := d.ready(c); err != nil {
		return err
	}
	ex, err := d.assignAcked(assignment{
		cfg:        StepConfig{Mode: ModeEcho, Deps: []string{"prev"}},
		input:      map[string]any{"order_id": "c-1", "items": []any{1.5, "two", true, nil}},
		deps:       map[string]any{"prev": map[string]any{"charge_id": "ch-1"}, "unused": "not echoed"},
		completeBy: time.Now().Add(30 * time.Second),
	})
	if err != nil {
		return err
	}
	r, err := d.waitResult(ex, resultTimeout)
	if err != nil {
		return err
	}
	d.checkEcho(ex, r, map[string]any{"prev": map[string]any{"charge_id": "ch-1"}})
	return d.quiet(300 * time.Millisecond) // a duplicate would be flagged
}

func caseErrorResult(d *driver, c *caseRun) error {
	if err := d.ready(c); err != nil {
		return err
	}
	want := &reevev1.StepError{Code: "conformance_failed", Message: "asked to fail", NonRetryable: true}
	ex, err := d.assignAcked(assignment{
		cfg:        StepConfig{Mode: ModeFail, Error: &StepError{Code: want.GetCode(), Message: want.GetMessage(), NonRetryable: true}},
		completeBy: time.Now().Add(30 * time.Second),
	})
	if err != nil {
		return err
	}
	r, err := d.waitResult(ex, resultTimeout)
	if err != nil {
		return err
	}
	// The message may add context (the Go SDK prefixes the code).
	if got := r.GetError(); got == nil || got.GetCode() != want.GetCode() || got.GetNonRetryable() != want.GetNonRetryable() || !strings.Contains(got.GetMessage(), want.GetMessage()) {
		c.errorf("error of %s is %s, want code %q, non_retryable true and a message containing %q", refKey(ex.a.GetRef()), oneLine(r.GetError()), want.GetCode(), want.GetMessage())
	}
	if out := r.GetOutput(); out != nil && out.GetKind() != nil {
		if _, null := out.GetKind().(*structpb.Value_NullValue); !null {
			c.errorf("a failed result carries output %s; send only the error", oneLine(out))
		}
	}
	return d.quiet(300 * time.Millisecond)
}

func caseDeadline(d *driver, c *caseRun) error {
	if err := d.ready(c); err != nil {
		return err
	}
	start := time.Now()
	past, err := d.assign(assignment{step: "expired-on-arrival", cfg: StepConfig{Mode: ModeEcho}, completeBy: start.Add(-time.Second)})
	if err != nil {
		return err
	}
	past.forbid = "its complete_by had passed when it was assigned"
	during, err := d.assign(assignment{step: "expires-while-running", cfg: StepConfig{Mode: ModeSleep, SleepMS: 1500}, completeBy: start.Add(500 * time.Millisecond)})
	if err != nil {
		return err
	}
	during.forbid = "its complete_by passed while it ran"
	if err := d.quiet(time.Until(start.Add(1500*time.Millisecond + lateResultWait))); err != nil {
		return c.fatalf("stream: %v", err)
	}
	return nil
}

func caseCancel(d *driver, c *caseRun) error {
	if err := d.ready(c); err != nil {
		return err
	}
	start := time.Now()
	ex, err := d.assignAcked(assignment{cfg: StepConfig{Mode: ModeSleep, SleepMS: 1500}, completeBy: start.Add(30 * time.Second)})
	if err != nil {
		return err
	}
	ex.forbid = "it was canceled by CancelStep"
	if err := d.send(&reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_Cancel{Cancel: &reevev1.CancelStep{Ref: ex.a.GetRef(), Reason: "conformance: task canceled"}}}); err != nil {
		return err
	}
	if err := d.quiet(time.Until(start.Add(1500*time.Millisecond + lateResultWait))); err != nil {
		return c.fatalf("stream: %v", err)
	}
	return nil
}

func caseStaleAttempt(d *driver, c *caseRun) error {
	if err := d.ready(c); err != nil {
		return err
	}
	start := time.Now()
	first, err := d.assign(assignment{attempt: 1, cfg: StepConfig{Mode: ModeSleep, SleepMS: 1500}, completeBy: start.Add(400 * time.Millisecond)})
	if err != nil {
		return err
	}
	first.forbid = "its complete_by passed while it ran (attempt 2 replaced it)"
	if err := d.waitAck(first, ackTimeout); err != nil {
		return err
	}
	if err := d.quiet(time.Until(start.Add(600 * time.Millisecond))); err != nil {
		return c.fatalf("stream: %v", err)
	}
	second, err := d.assignAcked(assignment{attempt: 2, cfg: StepConfig{Mode: ModeEcho}, input: "retry", completeBy: time.Now().Add(30 * time.Second)})
	if err != nil {
		return err
	}
	r, err := d.waitResult(second, resultTimeout)
	if err != nil {
		return err
	}
	d.checkEcho(second, r, nil)
	if err := d.quiet(time.Until(start.Add(1500*time.Millisecond + lateResultWait))); err != nil {
		return c.fatalf("stream: %v", err)
	}
	return nil
}

func caseRefusedResult(d *driver, c *caseRun) error {
	if err := d.ready(c); err != nil {
		return err
	}
	ex, err := d.assignAcked(assignment{cfg: StepConfig{Mode: ModeEcho}, policy: ackRefuse, completeBy: time.Now().Add(30 * time.Second)})
	if err != nil {
		return err
	}
	if _, err := d.waitResult(ex, resultTimeout); err != nil {
		return err
	}
	// Resent here, or listed in Register.running by a later reconnect
	// (redelivery, drain), it is flagged against this case.
	return d.quiet(500 * time.Millisecond)
}

func caseRedelivery(d *driver, c *caseRun) error {
	if err := d.ready(c); err != nil {
		return err
	}
	ex, err := d.assignAcked(assignment{cfg: StepConfig{Mode: ModeEcho}, input: map[string]any{"n": 1}, policy: ackWithhold, completeBy: time.Now().Add(30 * time.Second)})
	if err != nil {
		return err
	}
	first, err := d.waitResult(ex, resultTimeout)
	if err != nil {
		return err
	}
	d.checkEcho(ex, first, nil)
	d.breakSession()
	if _, err := d.accept(reconnectTimeout); err != nil {
		return c.fatalf("after the stream broke: %v", err)
	}
	if !listsRef(d.lastReg, ex.a.GetRef()) {
		c.errorf("register.running after the reconnect does not list %s, whose result was not acknowledged", refKey(ex.a.GetRef()))
	}
	ex.policy = ackAccept
	again, err := d.waitResult(ex, resultTimeout)
	if err != nil {
		return c.fatalf("the unacknowledged result was not sent again on the new stream: %v", err)
	}
	if !proto.Equal(first, again) {
		c.errorf("the result sent again differs: %s, first %s", oneLine(again), oneLine(first))
	}
	return d.quiet(300 * time.Millisecond)
}

func caseDrain(d *driver, c *caseRun) error {
	if err := d.ready(c); err != nil {
		return err
	}
	ex, err := d.assignAcked(assignment{cfg: StepConfig{Mode: ModeSleep, SleepMS: 1000}, completeBy: time.Now().Add(30 * time.Second)})
	if err != nil {
		return err
	}
	if err := d.send(&reevev1.ConnectResponse{Msg: &reevev1.ConnectResponse_Drain{Drain: &reevev1.Drain{Reason: "conformance: scheduler going away"}}}); err != nil {
		return err
	}
	switch err := d.wait(5*time.Second, nil); {
	case errors.Is(err, errTimeout):
		c.errorf("the agent did not close its side of the stream within 5s of Drain")
		d.closeSession()
	case !errors.Is(err, errStreamEnded):
		return err
	}
	if len(ex.results) > 0 {
		return c.fatalf("the result of %s was sent on the drained stream; send it on the new one", refKey(ex.a.GetRef()))
	}
	if _, err := d.accept(reconnectTimeout); err != nil {
		return c.fatalf("after Drain: %v", err)
	}
	if !listsRef(d.lastReg, ex.a.GetRef()) {
		c.errorf("register.running after the reconnect does not list %s, still running", refKey(ex.a.GetRef()))
	}
	r, err := d.waitResult(ex, resultTimeout)
	if err != nil {
		return err
	}
	d.checkEcho(ex, r, nil)
	return nil
}

func caseHeartbeat(d *driver, c *caseRun) error {
	if err := d.ready(c); err != nil {
		return err
	}
	const timeout = 1500 * time.Millisecond
	sent := time.Now()
	ex, err := d.assignAcked(assignment{cfg: StepConfig{Mode: ModeSleep, SleepMS: 3000}, heartbeat: timeout, completeBy: sent.Add(30 * time.Second)})
	if err != nil {
		return err
	}
	r, err := d.waitResult(ex, resultTimeout)
	if err != nil {
		return err
	}
	d.checkEcho(ex, r, nil)
	marks := append(append([]time.Time{sent}, ex.beats...), ex.resultTimes[len(ex.resultTimes)-1])
	for i := 1; i < len(marks); i++ {
		if gap := marks[i].Sub(marks[i-1]); gap > timeout {
			what := fmt.Sprintf("heartbeat %d", i)
			if i == 1 {
				what = "the first heartbeat after the assignment"
			}
			if i == len(marks)-1 {
				what = "the result after the last heartbeat"
			}
			c.errorf("%s came %v later, more than heartbeat_timeout %v (%d heartbeats in all)", what, gap.Round(time.Millisecond), timeout, len(ex.beats))
		}
	}
	return nil
}

func caseShutdown(d *driver, c *caseRun) error {
	if d.proc == nil {
		c.skip = "the agent was not started by the suite (no agent command given)"
		return nil
	}
	if err := d.ready(c); err != nil {
		return err
	}
	ex, err := d.assignAcked(assignment{cfg: StepConfig{Mode: ModeSleep, SleepMS: 1000}, completeBy: time.Now().Add(30 * time.Second)})
	if err != nil {
		return err
	}
	d.proc.Stop()
	err = d.wait(resultTimeout, func(*reevev1.ConnectRequest) bool { return d.agentDrained && len(ex.results) > 0 })
	if !d.agentDrained {
		c.errorf("the agent sent no Drain after SIGTERM")
	}
	if len(ex.results) == 0 {
		return c.fatalf("the running step's result was not reported before shutting down (%v)", err)
	}
	d.checkEcho(ex, ex.results[0], nil)
	switch err := d.wait(5*time.Second, nil); {
	case errors.Is(err, errTimeout):
		c.errorf("the agent did not end the stream within 5s of its last result")
	case !errors.Is(err, errStreamEnded):
		return err
	}
	select {
	case <-d.proc.Exited():
		if err := d.proc.Err(); err != nil {
			c.errorf("the agent exited with %v after SIGTERM, want success", err)
		}
	case <-time.After(10 * time.Second):
		c.errorf("the agent did not exit within 10s of SIGTERM")
	}
	return nil
}

func listsRef(reg *reevev1.Register, ref *reevev1.StepRef) bool {
	for _, r := range reg.GetRunning() {
		if proto.Equal(r, ref) {
			return true
		}
	}
	return false
}
