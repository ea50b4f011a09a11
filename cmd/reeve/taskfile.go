package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// readWorkflowFile reads a workflow definition: the protojson form of
// reeve.v1.Workflow, as .json or .yaml/.yml. Unknown fields are errors, so
// that a typo does not silently change a workflow. Enum values may be
// written short and in any case (`escalation: compensate`), durations in
// Go's form too (`timeout: 2m`); an error names the file's line, the field
// path and what is accepted (normalizeFile).
func readWorkflowFile(path string) (*reevev1.Workflow, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("-f: %v", err)
	}
	return parseWorkflow(path, b)
}

func parseWorkflow(path string, b []byte) (*reevev1.Workflow, error) {
	src := b
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			return nil, usagef("-f %s: %v", path, err)
		}
		b = j
	case ".json":
	default:
		return nil, usagef("-f %s: want a .json, .yaml or .yml file", path)
	}
	w := &reevev1.Workflow{}
	j, err := normalizeFile(path, src, b, w.ProtoReflect().Descriptor())
	if err != nil {
		return nil, usageError{err}
	}
	if err := protojson.Unmarshal(j, w); err != nil {
		return nil, usageError{&fileError{path: path, msg: err.Error()}}
	}
	return w, nil
}

// parseInput parses --input as any JSON value.
func parseInput(s string) (*structpb.Value, error) {
	if s == "" {
		return nil, nil
	}
	v := &structpb.Value{}
	if err := protojson.Unmarshal([]byte(s), v); err != nil {
		return nil, usagef("--input: not valid JSON: %v", err)
	}
	return v, nil
}

// parseTaskState accepts "running", "RUNNING" or "TASK_STATE_RUNNING".
func parseTaskState(s string) (reevev1.TaskState, error) {
	if s == "" {
		return reevev1.TaskState_TASK_STATE_UNSPECIFIED, nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "TASK_STATE_") {
		name = "TASK_STATE_" + name
	}
	v, ok := reevev1.TaskState_value[name]
	if !ok || v == 0 {
		return 0, usagef("--state: unknown task state %q (want pending, running, succeeded, failed, compensating, compensated or canceled)", s)
	}
	return reevev1.TaskState(v), nil
}

func shortState[T fmt.Stringer](s T, prefix string) string {
	return strings.TrimPrefix(s.String(), prefix)
}
