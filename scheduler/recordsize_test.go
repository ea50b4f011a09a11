package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// The largest task the limits allow keeps growing after its outputs filled
// it: every failure adds its error message (up to 4 KiB) to the step's
// last_error and to the history. A record past etcd's request limit (1.5
// MiB) could never be written again: not a result, not a recovery, not even
// CancelTask. So the record stays within MaxTaskRecordBytes: what it keeps
// for people to read (long history messages first) is shortened, and every
// write still lands. Before that shortening, the 62nd failure here was
// refused with "record too large" (a 1.56 MB record).
//
// The task: an input near 64 KiB, a chain of steps whose outputs fill the
// record to just under 1 MiB, then 56 parallel steps with long names run by
// an agent with a long id, each failing again and again with a 4 KiB
// message: untrimmed, about 1.6 MiB.
func TestARecordFullOfOutputsAndLongErrorsStaysWritable(t *testing.T) {
	// The agent answers one assignment at a time, each a write of a record
	// near 1 MiB (slow under -race): its other assignments must neither be
	// taken back unacknowledged nor expire meanwhile.
	env := testenv.New(t)
	s := env.StartScheduler("", scheduler.WithAckTimeout(time.Minute))
	c := s.Client(t)
	const (
		fills    = 15
		width    = 56
		failures = 70 // untrimmed, the 62nd was refused
	)
	step := func(name, typ string, deps ...string) *reevev1.StepSpec {
		return &reevev1.StepSpec{Name: name, Type: typ, DependsOn: deps, Timeout: durationpb.New(10 * time.Minute)}
	}
	var steps []*reevev1.StepSpec
	for i := range fills {
		st := step(fmt.Sprintf("fill%02d", i), "fill")
		if i > 0 {
			st.DependsOn = []string{fmt.Sprintf("fill%02d", i-1)}
		}
		steps = append(steps, st)
	}
	long := func(i int) string { return fmt.Sprintf("p%02d-", i) + strings.Repeat("x", 59) } // 63 characters
	for i := range width {
		st := step(long(i), "boom", fmt.Sprintf("fill%02d", fills-1))
		st.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 100, InitialBackoff: durationpb.New(0)}
		steps = append(steps, st)
	}
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "big", Workflow: inline(steps...),
		Input: testenv.Value(t, strings.Repeat("i", 60<<10))})

	agent := testenv.ConnectRaw(t, s.Addr, register(strings.Repeat("a", 128), 100, "fill", "boom"))
	errCode := strings.Repeat("c", 63)
	message := strings.Repeat("m", 4096)
	for done := 0; done < failures; {
		as := agent.NextAssignment(wait)
		var ack *reevev1.ResultAck
		if as.GetType() == "fill" {
			ack = agent.Succeed(as.GetRef(), map[string]any{"out": strings.Repeat("o", 62<<10)})
		} else {
			ack = agent.Fail(as.GetRef(), &reevev1.StepError{Code: errCode, Message: message})
			done++
		}
		if !ack.GetAccepted() {
			t.Fatalf("result %d for %s/%d refused: %s", done, as.GetRef().GetStep(), as.GetRef().GetAttempt(), ack.GetStatus().GetMessage())
		}
	}

	// Shortening keeps the record within MaxTaskRecordBytes plus what the
	// steps' own fields (agent, times, error code and shortened message:
	// under 1 KiB a step) and the newest history events added after the
	// outputs filled it: far below etcd's 1.5 MiB.
	size := recordSize(t, env, "big")
	if bound := scheduler.MaxTaskRecordBytes + (fills+width+20)<<10; size > bound {
		t.Errorf("record is %d bytes, over %d", size, bound)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: "big", Reason: strings.Repeat("r", 1024)})
	if err != nil {
		t.Fatalf("CancelTask of the full task: %v", err)
	}
	task := resp.GetTask()
	if task.GetState() != reevev1.TaskState_TASK_STATE_CANCELED {
		t.Fatalf("task %v after CancelTask", task.GetState())
	}
	// What was shortened is text for people, never an output.
	for _, st := range task.GetSteps() {
		if strings.HasPrefix(st.GetName(), "fill") && len(st.GetOutput().GetStructValue().GetFields()["out"].GetStringValue()) != 62<<10 {
			t.Fatalf("output of %s was changed", st.GetName())
		}
	}
	h := task.GetHistory()
	if last := h[len(h)-1]; last.GetKind() != "task.canceled" {
		t.Fatalf("newest event %s, want task.canceled", last.GetKind())
	}
	t.Logf("record %d bytes; %d history events, %d dropped", size, len(h), task.GetHistoryDropped())
}

// recordSize is the size of a task's record in etcd.
func recordSize(t *testing.T, env *testenv.Env, id string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := env.Etcd.Client().Get(ctx, "/reeve/tasks/default/"+id, clientv3.WithLimit(1))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read record %s: %v (%d keys)", id, err, len(resp.Kvs))
	}
	return len(resp.Kvs[0].Value)
}
