package workflow_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

func valid() *reevev1.Workflow {
	return &reevev1.Workflow{Name: "orders", Steps: []*reevev1.StepSpec{
		{Name: "reserve", Type: "inventory.reserve", Compensation: &reevev1.CompensationSpec{Type: "inventory.release"}},
		{Name: "charge", Type: "payments.charge", DependsOn: []string{"reserve"}, Escalation: reevev1.Escalation_ESCALATION_COMPENSATE},
	}}
}

func TestValidateWorkflow(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(w *reevev1.Workflow)
		want   string // field path in the error; "" means valid
	}{
		{"valid", func(w *reevev1.Workflow) {}, ""},
		{"missing name", func(w *reevev1.Workflow) { w.Name = "" }, "workflow.name: required"},
		{"bad name", func(w *reevev1.Workflow) { w.Name = "a b" }, "workflow.name"},
		{"no steps", func(w *reevev1.Workflow) { w.Steps = nil }, "workflow.steps: at least one"},
		{"too many steps", func(w *reevev1.Workflow) {
			for i := range workflow.MaxSteps {
				w.Steps = append(w.Steps, &reevev1.StepSpec{Name: "s" + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + string(rune('a'+i/26)), Type: "t"})
			}
		}, "workflow.steps: 102 steps"},
		{"duplicate step", func(w *reevev1.Workflow) { w.Steps[1].Name = "reserve" }, "workflow.steps[1].name: duplicate"},
		{"missing type", func(w *reevev1.Workflow) { w.Steps[0].Type = "" }, "workflow.steps[0].type: required"},
		{"unknown dependency", func(w *reevev1.Workflow) { w.Steps[1].DependsOn = []string{"ghost"} }, `workflow.steps[1].dependsOn[0]: unknown step "ghost"`},
		{"self dependency", func(w *reevev1.Workflow) { w.Steps[1].DependsOn = []string{"charge"} }, "workflow.steps[1].dependsOn[0]: a step cannot depend on itself"},
		{"misspelled dependency", func(w *reevev1.Workflow) { w.Steps[1].DependsOn = []string{"reserv"} }, `workflow.steps[1].dependsOn[0]: unknown step "reserv"; did you mean "reserve"?`},
		{"duplicate dependency", func(w *reevev1.Workflow) { w.Steps[1].DependsOn = []string{"reserve", "reserve"} }, "workflow.steps[1].dependsOn[1]: duplicate"},
		{"cycle", func(w *reevev1.Workflow) { w.Steps[0].DependsOn = []string{"charge"} }, "workflow.steps: cycle: reserve -> charge -> reserve"},
		{"timeout too short", func(w *reevev1.Workflow) { w.Steps[0].Timeout = durationpb.New(time.Millisecond) }, "workflow.steps[0].timeout"},
		{"timeout too long", func(w *reevev1.Workflow) { w.Steps[0].Timeout = durationpb.New(25 * time.Hour) }, "workflow.steps[0].timeout"},
		{"default timeout", func(w *reevev1.Workflow) { w.DefaultTimeout = durationpb.New(0) }, "workflow.defaultTimeout"},
		{"schedule-to-start too short", func(w *reevev1.Workflow) { w.Steps[0].ScheduleToStartTimeout = durationpb.New(time.Millisecond) }, "workflow.steps[0].scheduleToStartTimeout"},
		{"schedule-to-start too long", func(w *reevev1.Workflow) { w.Steps[0].ScheduleToStartTimeout = durationpb.New(25 * time.Hour) }, "workflow.steps[0].scheduleToStartTimeout"},
		{"default schedule-to-start", func(w *reevev1.Workflow) { w.DefaultScheduleToStartTimeout = durationpb.New(0) }, "workflow.defaultScheduleToStartTimeout"},
		{"negative attempts", func(w *reevev1.Workflow) { w.Steps[0].RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: -1} }, "workflow.steps[0].retryPolicy.maxAttempts"},
		{"too many attempts", func(w *reevev1.Workflow) { w.DefaultRetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 101} }, "workflow.defaultRetryPolicy.maxAttempts"},
		{"backoff order", func(w *reevev1.Workflow) {
			w.Steps[0].RetryPolicy = &reevev1.RetryPolicy{InitialBackoff: durationpb.New(time.Minute), MaxBackoff: durationpb.New(time.Second)}
		}, "workflow.steps[0].retryPolicy.initialBackoff: larger than maxBackoff"},
		{"multiplier", func(w *reevev1.Workflow) { w.Steps[0].RetryPolicy = &reevev1.RetryPolicy{BackoffMultiplier: 0.5} }, "workflow.steps[0].retryPolicy.backoffMultiplier"},
		{"empty code", func(w *reevev1.Workflow) {
			w.Steps[0].RetryPolicy = &reevev1.RetryPolicy{NonRetryableErrorCodes: []string{""}}
		}, "nonRetryableErrorCodes[0]"},
		{"compensation type", func(w *reevev1.Workflow) { w.Steps[0].Compensation.Type = "" }, "workflow.steps[0].compensation.type: required"},
		{"compensate without compensations", func(w *reevev1.Workflow) { w.Steps[0].Compensation = nil }, "workflow.steps[1].escalation: compensate needs"},
		{"unknown escalation", func(w *reevev1.Workflow) { w.Steps[0].Escalation = 42 }, "workflow.steps[0].escalation: unknown"},
		{"heartbeat over timeout", func(w *reevev1.Workflow) {
			w.Steps[0].Timeout = durationpb.New(time.Second)
			w.Steps[0].HeartbeatTimeout = durationpb.New(time.Minute)
		}, "workflow.steps[0].heartbeatTimeout"},
		{"reassign after disconnect over timeout", func(w *reevev1.Workflow) {
			w.Steps[0].Timeout = durationpb.New(time.Second)
			w.Steps[0].ReassignAfterDisconnect = durationpb.New(2 * time.Second)
		}, "workflow.steps[0].reassignAfterDisconnect"},
		{"reassign after disconnect too short", func(w *reevev1.Workflow) {
			w.Steps[0].ReassignAfterDisconnect = durationpb.New(time.Millisecond)
		}, "workflow.steps[0].reassignAfterDisconnect"},
		{"config too large", func(w *reevev1.Workflow) {
			w.Steps[0].Config = structpb.NewStringValue(strings.Repeat("x", workflow.MaxConfigBytes))
		}, "workflow.steps[0].config"},
		{"config of no kind", func(w *reevev1.Workflow) {
			w.Steps[0].Config = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewBoolValue(true), {}}})
		}, "workflow.steps[0].config[1]: a google.protobuf.Value with no kind set"},
		{"description", func(w *reevev1.Workflow) { w.Description = strings.Repeat("d", 2000) }, "workflow.description"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := valid()
			tc.mutate(w)
			before := proto.Clone(w)
			err := workflow.ValidateWorkflow("workflow", w, true)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if (tc.want == "") != (err == nil) || !strings.Contains(got, tc.want) {
				t.Fatalf("got %q, want error containing %q", got, tc.want)
			}
			if !proto.Equal(before, w) {
				t.Fatal("validation changed its input")
			}
		})
	}
}

// kindless is {"items": [1, "two", <a Value of no kind>]}.
func kindless(t *testing.T) *structpb.Value {
	t.Helper()
	v, err := structpb.NewValue(map[string]any{"items": []any{1, "two", nil}})
	if err != nil {
		t.Fatal(err)
	}
	v.GetStructValue().GetFields()["items"].GetListValue().Values[2] = &structpb.Value{}
	return v
}

func TestValidateSubmitAndAgentMessages(t *testing.T) {
	ref := func(name string) *reevev1.SubmitTaskRequest_WorkflowRef {
		return &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: name}}
	}
	deep := structpb.NewNullValue()
	for range workflow.MaxValueDepth + 2 {
		deep = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{deep}})
	}
	stepRef := &reevev1.StepRef{Namespace: "default", TaskId: "t", Step: "s", Attempt: 1}
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"valid submit", workflow.ValidateSubmit(&reevev1.SubmitTaskRequest{Workflow: ref("orders")}), ""},
		{"nil submit", workflow.ValidateSubmit(nil), "request: required"},
		{"no workflow", workflow.ValidateSubmit(&reevev1.SubmitTaskRequest{}), "workflow: one of workflow_ref or inline_workflow is required"},
		{"bad namespace", workflow.ValidateSubmit(&reevev1.SubmitTaskRequest{Namespace: "UPPER", Workflow: ref("o")}), "namespace"},
		{"bad task id", workflow.ValidateSubmit(&reevev1.SubmitTaskRequest{TaskId: "a/b", Workflow: ref("o")}), "task_id"},
		{"bad ref", workflow.ValidateSubmit(&reevev1.SubmitTaskRequest{Workflow: ref("")}), "workflow_ref.name: required"},
		{"negative version", workflow.ValidateSubmit(&reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: "o", Version: -1}}}), "workflow_ref.version"},
		{"inline", workflow.ValidateSubmit(&reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{}}}), "inline_workflow.steps"},
		{"deep input", workflow.ValidateSubmit(&reevev1.SubmitTaskRequest{Workflow: ref("o"), Input: deep}), "input[0][0]"},
		{"input of no kind", workflow.ValidateSubmit(&reevev1.SubmitTaskRequest{Workflow: ref("o"), Input: &structpb.Value{}}), "input: a google.protobuf.Value with no kind set"},
		{"list item of no kind", workflow.ValidateSubmit(&reevev1.SubmitTaskRequest{Workflow: ref("o"), Input: kindless(t)}), "input.items[2]: a google.protobuf.Value with no kind set"},
		{"member of no kind", workflow.ValidateSubmit(&reevev1.SubmitTaskRequest{Workflow: ref("o"), Input: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"ok": structpb.NewNullValue(), "a b": {}}})}), `input["a b"]: a google.protobuf.Value`},
		{"result output of no kind", workflow.ValidateStepResult(&reevev1.StepResult{Ref: stepRef, Outcome: &reevev1.StepResult_Output{Output: kindless(t)}}), "result.output.items[2]: a google.protobuf.Value with no kind set"},
		{"valid register", workflow.ValidateRegister(&reevev1.Register{AgentId: "a-1", StepTypes: []string{"t"}, MaxConcurrentSteps: 1}), ""},
		{"no agent id", workflow.ValidateRegister(&reevev1.Register{StepTypes: []string{"t"}, MaxConcurrentSteps: 1}), "register.agent_id: required"},
		{"no types", workflow.ValidateRegister(&reevev1.Register{AgentId: "a", MaxConcurrentSteps: 1}), "register.step_types"},
		{"duplicate type", workflow.ValidateRegister(&reevev1.Register{AgentId: "a", StepTypes: []string{"t", "t"}, MaxConcurrentSteps: 1}), "register.step_types[1]: duplicate"},
		{"zero capacity", workflow.ValidateRegister(&reevev1.Register{AgentId: "a", StepTypes: []string{"t"}}), "register.max_concurrent_steps"},
		{"bad running", workflow.ValidateRegister(&reevev1.Register{AgentId: "a", StepTypes: []string{"t"}, MaxConcurrentSteps: 1, Running: []*reevev1.StepRef{{TaskId: "t", Step: "s"}}}), "register.running[0].attempt"},
		{"valid result", workflow.ValidateStepResult(&reevev1.StepResult{Ref: stepRef}), ""},
		{"result without ref", workflow.ValidateStepResult(&reevev1.StepResult{}), "result.ref: required"},
		{"result output", workflow.ValidateStepResult(&reevev1.StepResult{Ref: stepRef, Outcome: &reevev1.StepResult_Output{Output: structpb.NewStringValue(strings.Repeat("o", workflow.MaxOutputBytes))}}), "result.output"},
		{"result message", workflow.ValidateStepResult(&reevev1.StepResult{Ref: stepRef, Outcome: &reevev1.StepResult_Error{Error: &reevev1.StepError{Message: strings.Repeat("m", 5000)}}}), "result.error.message"},
		{"result error details", workflow.ValidateStepResult(&reevev1.StepResult{Ref: stepRef, Outcome: &reevev1.StepResult_Error{Error: &reevev1.StepError{Details: structpb.NewStringValue(strings.Repeat("d", workflow.MaxErrorDetailsBytes))}}}), "result.error.details"},
		{"retry_after over a day", workflow.ValidateStepResult(&reevev1.StepResult{Ref: stepRef, Outcome: &reevev1.StepResult_Error{Error: &reevev1.StepError{RetryAfter: durationpb.New(25 * time.Hour)}}}), "result.error.retry_after"},
		{"negative retry_after", workflow.ValidateStepResult(&reevev1.StepResult{Ref: stepRef, Outcome: &reevev1.StepResult_Error{Error: &reevev1.StepError{RetryAfter: durationpb.New(-time.Second)}}}), "result.error.retry_after"},
		{"valid retry_after", workflow.ValidateStepResult(&reevev1.StepResult{Ref: stepRef, Outcome: &reevev1.StepResult_Error{Error: &reevev1.StepError{RetryAfter: durationpb.New(time.Minute), Details: structpb.NewBoolValue(true)}}}), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if tc.err != nil {
				got = tc.err.Error()
			}
			if (tc.want == "") != (tc.err == nil) || !strings.Contains(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBackoffGrowsAndIsCapped(t *testing.T) {
	p := &reevev1.RetryPolicy{InitialBackoff: durationpb.New(time.Second), MaxBackoff: durationpb.New(10 * time.Second), BackoffMultiplier: 3}
	cases := []struct {
		failures int
		want     time.Duration
	}{{1, time.Second}, {2, 3 * time.Second}, {3, 9 * time.Second}, {4, 10 * time.Second}, {1 << 30, 10 * time.Second}}
	for _, tc := range cases {
		if got := workflow.Backoff(p, tc.failures); got != tc.want {
			t.Errorf("Backoff(%d) = %v, want %v", tc.failures, got, tc.want)
		}
	}
}

func TestEffectivePolicyDefaults(t *testing.T) {
	w := &reevev1.Workflow{DefaultRetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 5}}
	s := &reevev1.StepSpec{}
	p := workflow.EffectiveRetryPolicy(w, s)
	if p.GetMaxAttempts() != 5 || p.GetInitialBackoff().AsDuration() != workflow.DefaultInitialBackoff ||
		p.GetMaxBackoff().AsDuration() != workflow.DefaultMaxBackoff || p.GetBackoffMultiplier() != workflow.DefaultBackoffMultiplier {
		t.Fatalf("effective policy %v", p)
	}
	if w.GetDefaultRetryPolicy().GetInitialBackoff() != nil {
		t.Fatal("EffectiveRetryPolicy changed the workflow")
	}
	if got := workflow.EffectiveTimeout(w, s); got != workflow.DefaultTimeout {
		t.Fatalf("timeout %v", got)
	}
	if workflow.Retryable(p, &reevev1.StepError{NonRetryable: true}) || !workflow.Retryable(p, &reevev1.StepError{Code: "x"}) {
		t.Fatal("Retryable")
	}
}

func TestFingerprintIgnoresServerFields(t *testing.T) {
	a, b := valid(), valid()
	b.Version, b.Namespace = 7, "other"
	if string(workflow.Fingerprint(a)) != string(workflow.Fingerprint(b)) {
		t.Fatal("fingerprint depends on version or namespace")
	}
	b.Steps[0].Type = "changed"
	if string(workflow.Fingerprint(a)) == string(workflow.Fingerprint(b)) {
		t.Fatal("fingerprint ignores a step change")
	}
}

func FuzzValidateWorkflow(f *testing.F) {
	for _, w := range []*reevev1.Workflow{valid(), {}, {Name: "x", Steps: []*reevev1.StepSpec{{Name: "a", Type: "t", DependsOn: []string{"a"}}}}} {
		b, _ := proto.Marshal(w)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		w := &reevev1.Workflow{}
		if proto.Unmarshal(b, w) != nil {
			return
		}
		if workflow.ValidateWorkflow("workflow", w, false) != nil {
			return
		}
		if _, err := workflow.TopoOrder(w); err != nil || len(w.GetSteps()) > workflow.MaxSteps {
			t.Fatalf("valid workflow but TopoOrder: %v, %d steps", err, len(w.GetSteps()))
		}
	})
}

func TestWidth(t *testing.T) {
	step := func(name string, deps ...string) *reevev1.StepSpec {
		return &reevev1.StepSpec{Name: name, Type: "t", DependsOn: deps}
	}
	cases := []struct {
		name  string
		steps []*reevev1.StepSpec
		want  int
	}{
		{"one", []*reevev1.StepSpec{step("a")}, 1},
		{"chain", []*reevev1.StepSpec{step("a"), step("b", "a"), step("c", "b")}, 1},
		{"fan-out", []*reevev1.StepSpec{step("a"), step("b", "a"), step("c", "a"), step("d", "a")}, 3},
		{"diamond", []*reevev1.StepSpec{step("a"), step("b", "a"), step("c", "a"), step("d", "b", "c")}, 2},
		// a->b, c->d, a->d: {b, d} or {b, c} are antichains of 2; {a, c} too.
		{"zigzag", []*reevev1.StepSpec{step("a"), step("b", "a"), step("c"), step("d", "c", "a")}, 2},
		// transitivity: a->b->c and x independent: {a,x},{b,x},{c,x} but never {a,c}.
		{"transitive", []*reevev1.StepSpec{step("a"), step("b", "a"), step("c", "b"), step("x")}, 2},
	}
	for _, c := range cases {
		if got := workflow.Width(&reevev1.Workflow{Steps: c.steps}, nil); got != c.want {
			t.Errorf("%s: Width = %d, want %d", c.name, got, c.want)
		}
	}
	wide := &reevev1.Workflow{Steps: []*reevev1.StepSpec{step("root")}}
	for i := range 70 {
		s := step(fmt.Sprintf("s%d", i), "root")
		if i%2 == 0 {
			s.Compensation = &reevev1.CompensationSpec{Type: "undo"}
		}
		wide.Steps = append(wide.Steps, s)
	}
	if got := workflow.Width(wide, nil); got != 70 {
		t.Errorf("70 dependents: Width = %d, want 70", got)
	}
	if got := workflow.Width(wide, func(s *reevev1.StepSpec) bool { return s.GetCompensation() != nil }); got != 35 {
		t.Errorf("35 compensable dependents: Width = %d, want 35", got)
	}
}

// Width runs on every registration and inline submission: the cost for the
// largest workflow (100 steps), a wide one and a chain.
func BenchmarkWidth100Steps(b *testing.B) {
	for _, shape := range []string{"fanout", "chain"} {
		w := &reevev1.Workflow{Steps: []*reevev1.StepSpec{{Name: "s000", Type: "t"}}}
		for i := 1; i < workflow.MaxSteps; i++ {
			dep := "s000"
			if shape == "chain" {
				dep = fmt.Sprintf("s%03d", i-1)
			}
			w.Steps = append(w.Steps, &reevev1.StepSpec{Name: fmt.Sprintf("s%03d", i), Type: "t", DependsOn: []string{dep}})
		}
		b.Run(shape, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				workflow.Width(w, nil)
			}
		})
	}
}

func TestDisconnectGrace(t *testing.T) {
	for _, tc := range []struct {
		name      string
		hb, g     time.Duration // 0: unset
		want      time.Duration
		wantGrace bool
	}{
		{"neither", 0, 0, 0, false},
		{"heartbeat", 2 * time.Second, 0, 2 * time.Second, true},
		{"reassign", 0, 3 * time.Second, 3 * time.Second, true},
		{"both: the shorter", 5 * time.Second, 3 * time.Second, 3 * time.Second, true},
	} {
		s := &reevev1.StepSpec{}
		if tc.hb > 0 {
			s.HeartbeatTimeout = durationpb.New(tc.hb)
		}
		if tc.g > 0 {
			s.ReassignAfterDisconnect = durationpb.New(tc.g)
		}
		if got, ok := workflow.DisconnectGrace(s); got != tc.want || ok != tc.wantGrace {
			t.Errorf("%s: DisconnectGrace = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.wantGrace)
		}
	}
}

func TestClosestSuggestsATypoOnly(t *testing.T) {
	cases := []struct {
		name       string
		candidates []string
		want       string
	}{
		{"create_biling", []string{"create_account", "create_billing", "send_welcome"}, "create_billing"},
		{"onboard.create_billing_customer", []string{"onboard.create_billing_customr", "onboard.send_email"}, "onboard.create_billing_customr"},
		{"ship", []string{"reserve", "charge"}, ""},
		{"charge", []string{"charge", "chargf"}, ""}, // a candidate itself
		{"x", nil, ""},
	}
	for _, tc := range cases {
		got, ok := workflow.Closest(tc.name, tc.candidates)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("Closest(%q, %v) = %q, %v; want %q", tc.name, tc.candidates, got, ok, tc.want)
		}
	}
	if got := workflow.FilePath("inline_workflow.steps[2].retry_policy.non_retryable_error_codes[0]"); got != "inline_workflow.steps[2].retryPolicy.nonRetryableErrorCodes[0]" {
		t.Errorf("FilePath: %q", got)
	}
	if got := workflow.FilePath("fence.election_key"); got != "fence.election_key" {
		t.Errorf("FilePath of a path outside a workflow: %q, want it unchanged", got)
	}
}

func TestNoAgentServesSuggestsTheNearestType(t *testing.T) {
	cases := []struct {
		typ    string
		served []string
		want   string
	}{
		{"onboard.create_billing_customer", []string{"onboard.create_account", "onboard.create_billing_customr", "onboard.send_welcome"},
			"no agent serves onboard.create_billing_customer; agents serve onboard.create_billing_customr"},
		{"pay.charge", []string{"ship.send", "inventory.reserve", "ship.send"}, "no agent serves pay.charge; agents serve inventory.reserve, ship.send"},
		{"pay.charge", []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7"}, "no agent serves pay.charge; agents serve a1, a2, a3, a4, a5 and 2 more"},
		{"pay.charge", nil, "no agent serves pay.charge; no agent of its namespace is connected"},
	}
	for _, tc := range cases {
		if got := workflow.NoAgentServes(tc.typ, tc.served); got != tc.want {
			t.Errorf("NoAgentServes(%q, %v) = %q, want %q", tc.typ, tc.served, got, tc.want)
		}
	}
}

// Concurrency and fairness keys are CEL expressions checked at
// registration: a refusal names the field and the line and column.
func TestValidateFlowKeys(t *testing.T) {
	base := func() *reevev1.Workflow {
		return &reevev1.Workflow{Name: "w", Steps: []*reevev1.StepSpec{{Name: "a", Type: "t"}}}
	}
	for _, tc := range []struct {
		edit func(*reevev1.Workflow)
		want string
	}{
		{func(w *reevev1.Workflow) {
			w.Concurrency = &reevev1.ConcurrencySpec{Key: "input.customer_id +", MaxRunning: 1}
		}, "workflow.concurrency.key: line 1, column 20: "},
		{func(w *reevev1.Workflow) { w.Concurrency = &reevev1.ConcurrencySpec{Key: "input.customer_id"} }, "workflow.concurrency.maxRunning: 0; must be 1 to 1000000"},
		{func(w *reevev1.Workflow) {
			w.Steps[0].Concurrency = &reevev1.ConcurrencySpec{Key: "input.a &&\n  )", MaxRunning: 2}
		}, "workflow.steps[0].concurrency.key: line 2, column 3: "},
		{func(w *reevev1.Workflow) { w.FairnessKey = "[1]" }, "workflow.fairnessKey: line 1, column 1: gives list(int)"},
	} {
		w := base()
		tc.edit(w)
		err := workflow.ValidateWorkflow("workflow", w, true)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v; want an error starting %q", err, tc.want)
		}
	}
	w := base()
	w.Concurrency = &reevev1.ConcurrencySpec{Key: "input.customer_id", MaxRunning: 1}
	w.Steps[0].Concurrency = &reevev1.ConcurrencySpec{Key: `"all"`, MaxRunning: 3}
	w.FairnessKey = "input.tenant"
	if err := workflow.ValidateWorkflow("workflow", w, true); err != nil {
		t.Errorf("valid keys refused: %v", err)
	}
}
