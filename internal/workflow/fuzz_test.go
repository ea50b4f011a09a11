package workflow_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// FuzzValidateWorkflowJSON feeds arbitrary protojson to workflow validation. It
// must never panic, must name a field when it refuses, and what it accepts
// respects the documented limits and has a stable fingerprint.
func FuzzValidateWorkflowJSON(f *testing.F) {
	f.Add([]byte(`{"name":"w","steps":[{"name":"a","type":"t"}]}`))
	f.Add([]byte(`{"name":"w","steps":[{"name":"a","type":"t","dependsOn":["b"]},{"name":"b","type":"t","dependsOn":["a"]}]}`))
	f.Add([]byte(`{"name":"w","defaultTimeout":"5s","steps":[{"name":"a","type":"t","timeout":"1s","heartbeatTimeout":"200ms","retryPolicy":{"maxAttempts":5,"initialBackoff":"1s","maxBackoff":"10s","backoffMultiplier":3},"compensation":{"type":"u"}}]}`))
	f.Add([]byte(`{"name":"../x","steps":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		w := &reevev1.Workflow{}
		if err := protojson.Unmarshal(b, w); err != nil {
			return
		}
		err := workflow.ValidateWorkflow("workflow", w, true)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "workflow") {
				t.Fatalf("refusal %q does not name a field of workflow", err)
			}
			return
		}
		if len(w.GetSteps()) == 0 || len(w.GetSteps()) > workflow.MaxSteps {
			t.Fatalf("accepted a workflow of %d steps", len(w.GetSteps()))
		}
		for _, s := range w.GetSteps() {
			if d := s.GetTimeout(); d != nil && (d.AsDuration() < workflow.MinTimeout || d.AsDuration() > workflow.MaxTimeout) {
				t.Fatalf("accepted timeout %v", d.AsDuration())
			}
			if strings.ContainsAny(s.GetName()+s.GetType(), "/\x00\n") {
				t.Fatalf("accepted step name %q type %q", s.GetName(), s.GetType())
			}
		}
		if string(workflow.Fingerprint(w)) != string(workflow.Fingerprint(proto.Clone(w).(*reevev1.Workflow))) {
			t.Fatalf("fingerprint of a copy differs")
		}
	})
}

// FuzzValidateSubmit feeds arbitrary binary SubmitTaskRequests.
func FuzzValidateSubmit(f *testing.F) {
	seed := func(r *reevev1.SubmitTaskRequest) {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(&reevev1.SubmitTaskRequest{Namespace: "a", TaskId: "t-1", Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "w"}}})
	seed(&reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "w", Steps: []*reevev1.StepSpec{{Name: "a", Type: "t", Timeout: durationpb.New(time.Second)}}}}})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := &reevev1.SubmitTaskRequest{}
		if err := proto.Unmarshal(b, r); err != nil {
			return
		}
		if err := workflow.ValidateSubmit(r); err != nil {
			return
		}
		if strings.ContainsAny(r.GetNamespace()+r.GetTaskId(), "/\x00") {
			t.Fatalf("accepted namespace %q task id %q", r.GetNamespace(), r.GetTaskId())
		}
		if proto.Size(r.GetInput()) > workflow.MaxInputBytes {
			t.Fatalf("accepted %d bytes of input", proto.Size(r.GetInput()))
		}
	})
}
