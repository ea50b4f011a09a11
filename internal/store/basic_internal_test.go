package store

import (
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
)

// fullTask is a task with every part the basic view leaves out set.
func fullTask(t *testing.T) *reevev1.Task {
	t.Helper()
	input, err := structpb.NewValue(map[string]any{"order": "o-1", "items": []any{map[string]any{"sku": "a", "qty": 2.0}}})
	if err != nil {
		t.Fatal(err)
	}
	now := timestamppb.New(time.Unix(1_700_000_000, 5))
	return &reevev1.Task{
		Namespace: "ns", Id: "t-1", State: reevev1.TaskState_TASK_STATE_RUNNING, Input: input,
		Workflow: &reevev1.Workflow{
			Namespace: "ns", Name: "orders", Version: 3, Description: "take orders",
			Steps:          []*reevev1.StepSpec{{Name: "a", Type: "charge", Config: structpb.NewStringValue("c"), Timeout: durationpb.New(time.Second)}},
			DefaultTimeout: durationpb.New(time.Minute), CreateTime: now,
		},
		Steps: []*reevev1.Step{
			{Name: "a", Type: "charge", State: reevev1.StepState_STEP_STATE_SUCCEEDED, Attempt: 1, Output: structpb.NewStringValue("receipt"), EndTime: now},
			{Name: "b", Type: "ship", State: reevev1.StepState_STEP_STATE_RUNNING, Attempt: 2, LockedByAgent: "agent-1",
				LastError: &reevev1.StepError{Message: "timeout"}, HeartbeatDetails: structpb.NewNumberValue(7)},
		},
		CreateTime: now, UpdateTime: now, Reason: "because",
		History:        []*reevev1.HistoryEvent{{Message: "created"}},
		HistoryDropped: 2,
	}
}

// basicOf is what the basic view of ListTasks shows of t (scheduler's
// basicView): everything but the input, history, step outputs and the
// workflow snapshot beyond its namespace, name and version.
func basicOf(t *reevev1.Task) *reevev1.Task {
	b := proto.Clone(t).(*reevev1.Task)
	b.Input, b.History = nil, nil
	if wf := b.GetWorkflow(); wf != nil {
		b.Workflow = &reevev1.Workflow{Namespace: wf.GetNamespace(), Name: wf.GetName(), Version: wf.GetVersion()}
	}
	for _, st := range b.GetSteps() {
		st.Output = nil
	}
	return b
}

func TestDecodeBasicIsTheBasicView(t *testing.T) {
	full := fullTask(t)
	bare := &reevev1.Task{Namespace: "ns", Id: "t-2", State: reevev1.TaskState_TASK_STATE_PENDING}
	noWorkflowFields := &reevev1.Task{Id: "t-3", Workflow: &reevev1.Workflow{}, Steps: []*reevev1.Step{{}}}
	for _, task := range []*reevev1.Task{full, bare, noWorkflowFields} {
		rec := &storev1.TaskRecord{Task: task, RequestDigest: []byte("digest"), TraceContext: map[string]string{"traceparent": "00-x"}}
		b, err := proto.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeBasic(b)
		if err != nil {
			t.Fatalf("%s: %v", task.GetId(), err)
		}
		if want := basicOf(task); !proto.Equal(want, got) {
			t.Errorf("%s: basic decoding differs from the basic view:\n got %v\nwant %v", task.GetId(), prototext.Format(got), prototext.Format(want))
		}
	}
}

// A record whose task field is written twice decodes as proto merges it.
func TestDecodeBasicMergesRepeatedTaskField(t *testing.T) {
	first, err := proto.Marshal(&storev1.TaskRecord{Task: &reevev1.Task{Id: "t-1", Reason: "first", Input: structpb.NewStringValue("x")}})
	if err != nil {
		t.Fatal(err)
	}
	second, err := proto.Marshal(&storev1.TaskRecord{Task: &reevev1.Task{State: reevev1.TaskState_TASK_STATE_FAILED}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeBasic(append(first, second...))
	if err != nil {
		t.Fatal(err)
	}
	want := &reevev1.Task{Id: "t-1", Reason: "first", State: reevev1.TaskState_TASK_STATE_FAILED}
	if !proto.Equal(want, got) {
		t.Errorf("got %v, want %v", prototext.Format(got), prototext.Format(want))
	}
	// The first record's bytes are unchanged (the merge copies).
	if again, err := decodeBasic(first); err != nil || again.GetState() != reevev1.TaskState_TASK_STATE_UNSPECIFIED {
		t.Fatalf("first record after the merge: %v, %v", again, err)
	}
}

func TestDecodeBasicRefusesMalformedRecords(t *testing.T) {
	good, err := proto.Marshal(&storev1.TaskRecord{Task: fullTask(t)})
	if err != nil {
		t.Fatal(err)
	}
	workflowAsVarint := protowire.AppendVarint(protowire.AppendTag(nil, taskWorkflowField, protowire.VarintType), 1)
	for name, b := range map[string][]byte{
		"truncated":            good[:len(good)-3],
		"bad tag":              {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"workflow not message": protowire.AppendBytes(protowire.AppendTag(nil, recordTaskField, protowire.BytesType), workflowAsVarint),
	} {
		if _, err := decodeBasic(b); err == nil {
			t.Errorf("%s: decoded, want an error", name)
		}
	}
}
