package workflow

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

var (
	namespaceRe = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	nameRe      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	taskIDRe    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	agentIDRe   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)
)

// Namespace returns ns, or DefaultNamespace when ns is empty.
func Namespace(ns string) string {
	if ns == "" {
		return DefaultNamespace
	}
	return ns
}

// ValidateNamespace accepts "" (the default namespace) or a DNS-label-like
// name: lowercase letters, digits and '-', at most 63 characters.
func ValidateNamespace(field, ns string) error {
	if ns != "" && !namespaceRe.MatchString(ns) {
		return fieldErr(field, "%q is not a valid namespace: 1-%d characters from [a-z0-9-], starting and ending with a letter or digit", ns, MaxNamespaceLen)
	}
	return nil
}

// ValidateName checks a required workflow name, step name or step type.
func ValidateName(field, s string) error {
	if s == "" {
		return fieldErr(field, "required")
	}
	if !nameRe.MatchString(s) {
		return fieldErr(field, "%q is not a valid name: 1-%d characters from [A-Za-z0-9._-], starting with a letter or digit", truncate(s), MaxNameLen)
	}
	return nil
}

// ValidateTaskID accepts "" (the server generates an id) or 1-128 characters
// from [A-Za-z0-9._:-] starting with a letter or digit.
func ValidateTaskID(field, id string) error {
	if id != "" && !taskIDRe.MatchString(id) {
		return fieldErr(field, "%q is not a valid task id: 1-%d characters from [A-Za-z0-9._:-], starting with a letter or digit", truncate(id), MaxTaskIDLen)
	}
	return nil
}

// ValidateAgentID checks a required agent id.
func ValidateAgentID(field, id string) error {
	if id == "" {
		return fieldErr(field, "required")
	}
	if !agentIDRe.MatchString(id) {
		return fieldErr(field, "%q is not a valid agent id: 1-%d characters from [A-Za-z0-9._:@-], starting with a letter or digit", truncate(id), MaxAgentIDLen)
	}
	return nil
}

// ValidateValue checks a JSON value: at most maxBytes encoded, nested at
// most MaxValueDepth deep, numbers finite, and every value, nested ones
// included, of some kind (a google.protobuf.Value with none of its oneof set,
// as Python's Value() makes, cannot be turned into JSON; null is
// null_value). An error names the path of the offending value, e.g.
// input.items[2] or input["a b"]. nil is valid (no value).
func ValidateValue(field string, v *structpb.Value, maxBytes int) error {
	if v == nil {
		return nil
	}
	if n := proto.Size(v); n > maxBytes {
		return fieldErr(field, "%d bytes encoded, more than the limit of %d", n, maxBytes)
	}
	return checkValue(field, v, 0)
}

func checkValue(path string, v *structpb.Value, depth int) error {
	if depth > MaxValueDepth {
		return fieldErr(path, "nested deeper than %d levels", MaxValueDepth)
	}
	switch k := v.GetKind().(type) {
	case nil:
		return fieldErr(path, "a google.protobuf.Value with no kind set; use null_value for null")
	case *structpb.Value_NumberValue:
		if math.IsNaN(k.NumberValue) || math.IsInf(k.NumberValue, 0) {
			return fieldErr(path, "numbers must be finite")
		}
	case *structpb.Value_StructValue:
		fields := k.StructValue.GetFields()
		for _, key := range slices.Sorted(maps.Keys(fields)) {
			if err := checkValue(memberPath(path, key), fields[key], depth+1); err != nil {
				return err
			}
		}
	case *structpb.Value_ListValue:
		for i, lv := range k.ListValue.GetValues() {
			if err := checkValue(fmt.Sprintf("%s[%d]", path, i), lv, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// memberPath is path.key, or path["key"] when key is not a plain
// identifier.
func memberPath(path, key string) string {
	plain := key != ""
	for i, r := range key {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			plain = false
			break
		}
	}
	if plain {
		return path + "." + key
	}
	return fmt.Sprintf("%s[%q]", path, truncate(key))
}

// ValidateWorkflow checks a workflow definition; field is its path ("workflow",
// "inline_workflow"). The name is required when requireName is set.
// Server-assigned fields (version, create_time) are ignored.
func ValidateWorkflow(field string, w *reevev1.Workflow, requireName bool) error {
	if w == nil {
		return fieldErr(field, "required")
	}
	if requireName || w.GetName() != "" {
		if err := ValidateName(field+".name", w.GetName()); err != nil {
			return err
		}
	}
	if len(w.GetDescription()) > MaxDescriptionBytes {
		return fieldErr(field+".description", "longer than %d bytes", MaxDescriptionBytes)
	}
	if err := validateRetryPolicy(field+".default_retry_policy", w.GetDefaultRetryPolicy()); err != nil {
		return err
	}
	if err := validateDuration(field+".default_timeout", w.GetDefaultTimeout(), MinTimeout, MaxTimeout); err != nil {
		return err
	}
	if err := validateDuration(field+".default_schedule_to_start_timeout", w.GetDefaultScheduleToStartTimeout(), MinTimeout, MaxTimeout); err != nil {
		return err
	}
	if err := validateTaskTimeout(field, w); err != nil {
		return err
	}
	steps := w.GetSteps()
	switch {
	case len(steps) == 0:
		return fieldErr(field+".steps", "at least one step is required")
	case len(steps) > MaxSteps:
		return fieldErr(field+".steps", "%d steps, more than the limit of %d", len(steps), MaxSteps)
	}
	seen := make(map[string]int, len(steps))
	for i, s := range steps {
		sf := fmt.Sprintf("%s.steps[%d]", field, i)
		if err := ValidateName(sf+".name", s.GetName()); err != nil {
			return err
		}
		if j, dup := seen[s.GetName()]; dup {
			return fieldErr(sf+".name", "duplicate step name %q (also steps[%d])", s.GetName(), j)
		}
		seen[s.GetName()] = i
	}
	for i, s := range steps {
		if err := validateStep(fmt.Sprintf("%s.steps[%d]", field, i), w, s, seen); err != nil {
			return err
		}
	}
	if _, err := TopoOrder(w); err != nil {
		return fieldErr(field+".steps", "%v", err)
	}
	return nil
}

func validateStep(field string, w *reevev1.Workflow, s *reevev1.StepSpec, names map[string]int) error {
	if waits, err := validateWaitFor(field, s); err != nil {
		return err
	} else if IsSleep(s) {
		if err := validateSleepStep(field, s); err != nil {
			return err
		}
	} else if !waits {
		if err := ValidateName(field+".type", s.GetType()); err != nil {
			return err
		}
	}
	deps := make(map[string]bool, len(s.GetDependsOn()))
	for j, dep := range s.GetDependsOn() {
		df := fmt.Sprintf("%s.depends_on[%d]", field, j)
		switch _, known := names[dep]; {
		case !known:
			return fieldErr(df, "unknown step %q%s", truncate(dep), DidYouMean(dep, stepNames(w)))
		case dep == s.GetName():
			return fieldErr(df, "a step cannot depend on itself")
		case deps[dep]:
			return fieldErr(df, "duplicate dependency %q", dep)
		}
		deps[dep] = true
	}
	if err := ValidateValue(field+".config", s.GetConfig(), MaxConfigBytes); err != nil {
		return err
	}
	if err := validateDuration(field+".timeout", s.GetTimeout(), MinTimeout, maxStepTimeout(s)); err != nil {
		return err
	}
	if err := validateRetryPolicy(field+".retry_policy", s.GetRetryPolicy()); err != nil {
		return err
	}
	if c := s.GetCompensation(); c != nil {
		if err := ValidateName(field+".compensation.type", c.GetType()); err != nil {
			return err
		}
		if err := ValidateValue(field+".compensation.config", c.GetConfig(), MaxConfigBytes); err != nil {
			return err
		}
		if err := validateDuration(field+".compensation.timeout", c.GetTimeout(), MinTimeout, MaxTimeout); err != nil {
			return err
		}
		if err := validateRetryPolicy(field+".compensation.retry_policy", c.GetRetryPolicy()); err != nil {
			return err
		}
		if err := validateDuration(field+".compensation.schedule_to_start_timeout", c.GetScheduleToStartTimeout(), MinTimeout, MaxTimeout); err != nil {
			return err
		}
	}
	if _, ok := reevev1.Escalation_name[int32(s.GetEscalation())]; !ok {
		return fieldErr(field+".escalation", "unknown escalation %d", s.GetEscalation())
	}
	if s.GetEscalation() == reevev1.Escalation_ESCALATION_COMPENSATE && !anyCompensation(w) {
		return fieldErr(field+".escalation", "compensate needs at least one step with a compensation")
	}
	if err := validateDuration(field+".escalation_wait", s.GetEscalationWait(), 0, MaxTimeout); err != nil {
		return err
	}
	if err := validateDuration(field+".schedule_to_start_timeout", s.GetScheduleToStartTimeout(), MinTimeout, MaxTimeout); err != nil {
		return err
	}
	if hb := s.GetHeartbeatTimeout(); hb != nil {
		if err := validateDuration(field+".heartbeat_timeout", hb, MinTimeout, EffectiveTimeout(w, s)); err != nil {
			return err
		}
	}
	if g := s.GetReassignAfterDisconnect(); g != nil {
		if err := validateDuration(field+".reassign_after_disconnect", g, MinTimeout, EffectiveTimeout(w, s)); err != nil {
			return err
		}
	}
	return nil
}

// DisconnectGrace is how long an execution of the step stays its agent's
// once the agent is known to be cut off (its stream ended, or it was lost
// with its scheduler), counted from the agent's last sign of life: the
// heartbeat timeout, the reassign_after_disconnect, the earlier of the two
// when both are set; ok is false when the step sets neither (its
// executions wait for their complete-by).
func DisconnectGrace(s *reevev1.StepSpec) (grace time.Duration, ok bool) {
	hb, g := s.GetHeartbeatTimeout(), s.GetReassignAfterDisconnect()
	switch {
	case hb != nil && g != nil:
		return min(hb.AsDuration(), g.AsDuration()), true
	case hb != nil:
		return hb.AsDuration(), true
	case g != nil:
		return g.AsDuration(), true
	}
	return 0, false
}

func stepNames(w *reevev1.Workflow) []string {
	out := make([]string, 0, len(w.GetSteps()))
	for _, s := range w.GetSteps() {
		out = append(out, s.GetName())
	}
	return out
}

func anyCompensation(w *reevev1.Workflow) bool {
	for _, s := range w.GetSteps() {
		if s.GetCompensation() != nil {
			return true
		}
	}
	return false
}

func validateDuration(field string, d *durationpb.Duration, lo, hi time.Duration) error {
	if d == nil {
		return nil
	}
	if err := d.CheckValid(); err != nil {
		return fieldErr(field, "invalid duration: %v", err)
	}
	if v := d.AsDuration(); v < lo || v > hi {
		return fieldErr(field, "%v is outside [%v, %v]", v, lo, hi)
	}
	return nil
}

func validateRetryPolicy(field string, p *reevev1.RetryPolicy) error {
	if p == nil {
		return nil
	}
	if p.GetMaxAttempts() < 0 || p.GetMaxAttempts() > MaxAttemptsLimit {
		return fieldErr(field+".max_attempts", "%d is outside [0, %d] (0 means %d)", p.GetMaxAttempts(), MaxAttemptsLimit, DefaultMaxAttempts)
	}
	if err := validateDuration(field+".initial_backoff", p.GetInitialBackoff(), 0, MaxTimeout); err != nil {
		return err
	}
	if err := validateDuration(field+".max_backoff", p.GetMaxBackoff(), 0, MaxTimeout); err != nil {
		return err
	}
	if p.GetInitialBackoff() != nil && p.GetMaxBackoff() != nil && p.GetInitialBackoff().AsDuration() > p.GetMaxBackoff().AsDuration() {
		return fieldErr(field+".initial_backoff", "larger than maxBackoff")
	}
	if m := p.GetBackoffMultiplier(); m != 0 && (math.IsNaN(m) || m < 1 || m > 100) {
		return fieldErr(field+".backoff_multiplier", "%v is outside [1, 100] (0 means %v)", m, DefaultBackoffMultiplier)
	}
	if n := len(p.GetNonRetryableErrorCodes()); n > MaxNonRetryableCodes {
		return fieldErr(field+".non_retryable_error_codes", "%d codes, more than the limit of %d", n, MaxNonRetryableCodes)
	}
	for i, c := range p.GetNonRetryableErrorCodes() {
		if c == "" || len(c) > MaxNameLen {
			return fieldErr(fmt.Sprintf("%s.non_retryable_error_codes[%d]", field, i), "must be 1-%d characters", MaxNameLen)
		}
	}
	return nil
}

// ValidateSubmit checks a SubmitTaskRequest (not the workflow a workflow_ref
// names, which was validated when it was registered).
func ValidateSubmit(req *reevev1.SubmitTaskRequest) error {
	if req == nil {
		return fieldErr("request", "required")
	}
	if err := ValidateNamespace("namespace", req.GetNamespace()); err != nil {
		return err
	}
	if err := ValidateTaskID("task_id", req.GetTaskId()); err != nil {
		return err
	}
	switch {
	case req.GetWorkflowRef() != nil:
		if err := ValidateName("workflow_ref.name", req.GetWorkflowRef().GetName()); err != nil {
			return err
		}
		if req.GetWorkflowRef().GetVersion() < 0 {
			return fieldErr("workflow_ref.version", "must not be negative (0 means the latest)")
		}
	case req.GetInlineWorkflow() != nil:
		if err := ValidateWorkflow("inline_workflow", req.GetInlineWorkflow(), false); err != nil {
			return err
		}
	default:
		return fieldErr("workflow", "one of workflow_ref or inline_workflow is required")
	}
	if err := ValidateLabels("labels", req.GetLabels()); err != nil {
		return err
	}
	if err := validateSubmitTimers(req); err != nil {
		return err
	}
	return ValidateValue("input", req.GetInput(), MaxInputBytes)
}

// ValidateLabels checks a task's labels, or a filter of them: at most
// MaxLabels; keys 1-63 and values 0-63 characters from [A-Za-z0-9._-], a
// key starting with a letter or digit. (The label index keeps them in etcd
// keys, whose separators they must not contain.)
func ValidateLabels(field string, labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fieldErr(field, "%d labels, more than %d", len(labels), MaxLabels)
	}
	for k, v := range labels {
		f := fmt.Sprintf("%s[%q]", field, k)
		if k == "" || len(k) > MaxLabelBytes || !labelChars(k) || !isAlnum(k[0]) {
			return fieldErr(f, "a label key is 1-%d characters from [A-Za-z0-9._-], starting with a letter or digit", MaxLabelBytes)
		}
		if len(v) > MaxLabelBytes || !labelChars(v) {
			return fieldErr(f, "a label value is 0-%d characters from [A-Za-z0-9._-]", MaxLabelBytes)
		}
	}
	return nil
}

func labelChars(s string) bool {
	for i := range len(s) {
		if c := s[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// ValidateRegister checks an agent's Register message.
func ValidateRegister(r *reevev1.Register) error {
	if err := ValidateAgentID("register.agent_id", r.GetAgentId()); err != nil {
		return err
	}
	if err := ValidateNamespace("register.namespace", r.GetNamespace()); err != nil {
		return err
	}
	types := r.GetStepTypes()
	switch {
	case len(types) == 0:
		return fieldErr("register.step_types", "at least one step type is required")
	case len(types) > MaxStepTypesPerAgent:
		return fieldErr("register.step_types", "%d types, more than the limit of %d", len(types), MaxStepTypesPerAgent)
	}
	seen := map[string]bool{}
	for i, t := range types {
		f := fmt.Sprintf("register.step_types[%d]", i)
		if err := ValidateName(f, t); err != nil {
			return err
		}
		if seen[t] {
			return fieldErr(f, "duplicate step type %q", t)
		}
		seen[t] = true
	}
	if m := r.GetMaxConcurrentSteps(); m < 1 || m > MaxConcurrentStepsLimit {
		return fieldErr("register.max_concurrent_steps", "%d is outside [1, %d]", m, MaxConcurrentStepsLimit)
	}
	if len(r.GetRunning()) > int(r.GetMaxConcurrentSteps()) {
		return fieldErr("register.running", "%d running steps, more than max_concurrent_steps", len(r.GetRunning()))
	}
	for i, ref := range r.GetRunning() {
		if err := ValidateStepRef(fmt.Sprintf("register.running[%d]", i), ref); err != nil {
			return err
		}
	}
	return nil
}

// ValidateStepRef checks a reference to one execution of a step.
func ValidateStepRef(field string, r *reevev1.StepRef) error {
	if r == nil {
		return fieldErr(field, "required")
	}
	if err := ValidateNamespace(field+".namespace", r.GetNamespace()); err != nil {
		return err
	}
	if r.GetTaskId() == "" {
		return fieldErr(field+".task_id", "required")
	}
	if err := ValidateTaskID(field+".task_id", r.GetTaskId()); err != nil {
		return err
	}
	if err := ValidateName(field+".step", r.GetStep()); err != nil {
		return err
	}
	if r.GetAttempt() < 1 {
		return fieldErr(field+".attempt", "must be at least 1")
	}
	return nil
}

// ValidateStepResult checks an agent's StepResult.
func ValidateStepResult(r *reevev1.StepResult) error {
	if err := ValidateStepRef("result.ref", r.GetRef()); err != nil {
		return err
	}
	if err := ValidateValue("result.output", r.GetOutput(), MaxOutputBytes); err != nil {
		return err
	}
	if e := r.GetError(); e != nil {
		if len(e.GetMessage()) > MaxErrorMessageBytes {
			return fieldErr("result.error.message", "longer than %d bytes", MaxErrorMessageBytes)
		}
		if len(e.GetCode()) > MaxNameLen {
			return fieldErr("result.error.code", "longer than %d characters", MaxNameLen)
		}
		if err := ValidateValue("result.error.details", e.GetDetails(), MaxErrorDetailsBytes); err != nil {
			return err
		}
		if ra := e.GetRetryAfter(); ra != nil {
			if err := ra.CheckValid(); err != nil || ra.AsDuration() < 0 || ra.AsDuration() > MaxRetryAfter {
				return fieldErr("result.error.retry_after", "must be between 0 and %s", MaxRetryAfter)
			}
		}
	}
	return nil
}

// truncate shortens a hostile value quoted back in an error message.
func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
