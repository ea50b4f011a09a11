package scheduler_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/workflow"
)

// wantField checks an INVALID_ARGUMENT whose message starts with field.
func wantField(t *testing.T, what string, err error, field string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), field) {
		t.Fatalf("%s: %v; want INVALID_ARGUMENT naming %s", what, err, field)
	}
}

// outputOf is a string value whose encoding is exactly n bytes, of random
// letters (a record is compressed: repeated ones would not fill it).
func outputOf(n int) *structpb.Value {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(rand.IntN(26))
	}
	v := structpb.NewStringValue(string(b))
	v = structpb.NewStringValue(string(b[:n-(proto.Size(v)-n)]))
	if proto.Size(v) != n {
		panic(fmt.Sprintf("output of %d bytes, want %d", proto.Size(v), n))
	}
	return v
}

// The largest waits the limits allow are accepted end to end, and one over
// is refused naming the field: a 30-day wait, a 366-day sleep, a task
// timeout of 366 days, a start 366 days ahead, an output of the maximum
// size through CompleteStep, the widest workflow of waits.
func TestWaitLimitsEndToEnd(t *testing.T) {
	env, _, c := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	submitErr := func(req *reevev1.SubmitTaskRequest) error {
		_, err := c.SubmitTask(ctx, req)
		return err
	}
	longest := &reevev1.StepSpec{Name: "w", WaitFor: "external", Timeout: durationpb.New(workflow.MaxWaitTimeout)}
	nap := &reevev1.StepSpec{Name: "nap", Sleep: durationpb.New(workflow.MaxSleep)}
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "long", Workflow: inline(longest, nap), TaskTimeout: durationpb.New(workflow.MaxTaskTimeout)})
	task := getTask(t, c, "long")
	if w, n := stepOf(task, "w"), stepOf(task, "nap"); w.GetState() != reevev1.StepState_STEP_STATE_WAITING || n.GetState() != reevev1.StepState_STEP_STATE_WAITING ||
		w.GetCompleteBy().AsTime().Sub(w.GetReadyTime().AsTime()) != workflow.MaxWaitTimeout || n.GetCompleteBy().AsTime().Sub(n.GetReadyTime().AsTime()) != workflow.MaxSleep {
		t.Fatalf("longest wait %v and sleep %v", w, n)
	}
	start := time.Now().Add(workflow.MaxStartDelay - time.Minute)
	later := &reevev1.SubmitTaskRequest{TaskId: "later", Workflow: inline(step("x", "nobody")), StartTime: timestamppb.New(start)}
	if got := submit(t, c, later); !got.GetStartTime().AsTime().Equal(start) {
		t.Fatalf("start time %v, want %v", got.GetStartTime(), start)
	}

	over := proto.Clone(longest).(*reevev1.StepSpec)
	over.Timeout = durationpb.New(workflow.MaxWaitTimeout + time.Second)
	wantField(t, "a wait over 30 days", submitErr(&reevev1.SubmitTaskRequest{Workflow: inline(over)}), "inline_workflow.steps[0].timeout")
	overNap := &reevev1.StepSpec{Name: "nap", Sleep: durationpb.New(workflow.MaxSleep + time.Second)}
	wantField(t, "a sleep over 366 days", submitErr(&reevev1.SubmitTaskRequest{Workflow: inline(overNap)}), "inline_workflow.steps[0].sleep")
	wantField(t, "a task timeout over 366 days", submitErr(&reevev1.SubmitTaskRequest{Workflow: inline(step("x", "nobody")),
		TaskTimeout: durationpb.New(workflow.MaxTaskTimeout + time.Second)}), "task_timeout")
	wantField(t, "a start over 366 days ahead", submitErr(&reevev1.SubmitTaskRequest{Workflow: inline(step("x", "nobody")),
		StartTime: timestamppb.New(time.Now().Add(workflow.MaxStartDelay + time.Hour))}), "start_time")

	// The largest output completes the wait; one byte more is refused.
	_, err := completeStep(c, &reevev1.CompleteStepRequest{TaskId: "long", Step: "w", Outcome: &reevev1.CompleteStepRequest_Output{Output: outputOf(workflow.MaxOutputBytes + 1)}})
	wantField(t, "an output one byte over", err, "output")
	resp, err := completeStep(c, &reevev1.CompleteStepRequest{TaskId: "long", Step: "w", Outcome: &reevev1.CompleteStepRequest_Output{Output: outputOf(workflow.MaxOutputBytes)}})
	if err != nil || resp.GetState() != reevev1.StepState_STEP_STATE_SUCCEEDED {
		t.Fatalf("the largest output: %v, %v", resp, err)
	}

	// The widest workflow of waits etcd's transaction limit allows: all
	// wait at once, and a cancel ends them all in one write.
	width := (store.DefaultMaxTxnOps - 12) / 2 // store.WorstCaseOps
	wide := func(n int) *reevev1.SubmitTaskRequest_InlineWorkflow {
		var steps []*reevev1.StepSpec
		for i := range n {
			steps = append(steps, &reevev1.StepSpec{Name: fmt.Sprintf("w%02d", i), WaitFor: "external", Timeout: durationpb.New(time.Hour)})
		}
		return inline(steps...)
	}
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "wide", Workflow: wide(width)})
	if n := keysOfTask(t, env, "/reeve/waiting/", "wide"); n != width {
		t.Fatalf("%d waiting keys, want %d", n, width)
	}
	wantField(t, "a workflow one wait wider", submitErr(&reevev1.SubmitTaskRequest{Workflow: wide(width + 1)}), "inline_workflow.steps")
	if got := cancelTask(t, c, "wide"); got.GetState() != reevev1.TaskState_TASK_STATE_CANCELED {
		t.Fatalf("cancel of the widest: %v", got.GetState())
	}
	if n := keysOfTask(t, env, "/reeve/waiting/", "wide") + keysOfTask(t, env, "/reeve/deadlines/", "wide"); n != 0 {
		t.Fatalf("%d waiting or deadline keys left", n)
	}
}

// Completions whose outputs fill the task record: the one that does not
// fit is refused INVALID_ARGUMENT naming the output and changes nothing
// (the step still waits: it can be completed with less, or rejected).
func TestCompletionOutputThatDoesNotFitTheRecord(t *testing.T) {
	_, _, c := newEnv(t)
	const n = 24 // 24 × 64 KiB is past the 1 MiB record
	var steps []*reevev1.StepSpec
	for i := range n {
		steps = append(steps, &reevev1.StepSpec{Name: fmt.Sprintf("w%02d", i), WaitFor: "external", Timeout: durationpb.New(time.Hour)})
	}
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "full", Workflow: inline(steps...)})
	refused := -1
	for i := range n {
		big := &reevev1.CompleteStepRequest_Output{Output: outputOf(workflow.MaxOutputBytes)}
		_, err := completeStep(c, &reevev1.CompleteStepRequest{TaskId: "full", Step: fmt.Sprintf("w%02d", i), Outcome: big})
		if err != nil {
			wantField(t, fmt.Sprintf("completion %d", i), err, "output")
			refused = i
			break
		}
	}
	if refused < 0 {
		t.Fatal("every output fit")
	}
	name := fmt.Sprintf("w%02d", refused)
	if st := stepOf(getTask(t, c, "full"), name).GetState(); st != reevev1.StepState_STEP_STATE_WAITING {
		t.Fatalf("%s is %v after its refused completion, want still WAITING", name, st)
	}
	resp, err := completeStep(c, &reevev1.CompleteStepRequest{TaskId: "full", Step: name, Outcome: reject("too_big", "")})
	if err != nil || resp.GetState() != reevev1.StepState_STEP_STATE_FAILED {
		t.Fatalf("a rejection of the step whose output did not fit: %v, %v", resp, err)
	}
}
