package store

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
)

// Field numbers the basic view filters, read from the generated
// descriptors (proto/reeve/v1/task.proto, workflow.proto,
// proto/reeve/store/v1/store.proto).
var (
	recordTaskField   = fieldNumber(&storev1.TaskRecord{}, "task")
	taskWorkflowField = fieldNumber(&reevev1.Task{}, "workflow")
	taskInputField    = fieldNumber(&reevev1.Task{}, "input")
	taskStepsField    = fieldNumber(&reevev1.Task{}, "steps")
	taskHistoryField  = fieldNumber(&reevev1.Task{}, "history")
	stepOutputField   = fieldNumber(&reevev1.Step{}, "output")
	// What the basic view keeps of the workflow snapshot.
	workflowKept = map[protowire.Number]bool{
		fieldNumber(&reevev1.Workflow{}, "namespace"): true,
		fieldNumber(&reevev1.Workflow{}, "name"):      true,
		fieldNumber(&reevev1.Workflow{}, "version"):   true,
	}
)

// fieldNumber is the number of m's field name; it panics when m has none
// (a renamed field: the basic view's filter would be wrong).
func fieldNumber(m proto.Message, name protoreflect.Name) protowire.Number {
	f := m.ProtoReflect().Descriptor().Fields().ByName(name)
	if f == nil {
		panic(fmt.Sprintf("store: %s has no field %s", m.ProtoReflect().Descriptor().FullName(), name))
	}
	return f.Number()
}

// decodeBasic decodes the task of an encoded TaskRecord in the basic view:
// without its input, history and step outputs, and with only the
// namespace, name and version of its workflow snapshot — what
// scheduler's basic view leaves of a task, without decoding what it leaves
// out. The skipped parts are never turned into messages: a record whose
// input is a 60 KB JSON document costs a list the bytes etcd returned and
// about a kilobyte, not the tens of thousands of allocations of a
// google.protobuf.Value tree (docs/benchmarks.md, "List memory").
func decodeBasic(stored []byte) (*reevev1.Task, error) {
	record, err := recordProto(stored)
	if err != nil {
		return nil, err
	}
	var task []byte
	occurrences := 0
	// A message field written more than once merges: its occurrences
	// concatenated decode as the merge. The store writes it once, and that
	// one is used where it is, not copied.
	err = eachField(record, func(num protowire.Number, field, value []byte) error {
		if num != recordTaskField {
			return nil
		}
		if occurrences++; occurrences == 1 {
			task = value
		} else {
			task = append(task[:len(task):len(task)], value...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 1024)
	err = eachField(task, func(num protowire.Number, field, value []byte) error {
		if (num == taskWorkflowField || num == taskStepsField) && value == nil {
			return fmt.Errorf("task field %d: not a message", num)
		}
		switch num {
		case taskInputField, taskHistoryField: // left out
		case taskWorkflowField:
			return appendFiltered(&out, num, value, func(n protowire.Number) bool { return workflowKept[n] })
		case taskStepsField:
			return appendFiltered(&out, num, value, func(n protowire.Number) bool { return n != stepOutputField })
		default:
			out = append(out, field...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	t := &reevev1.Task{}
	if err := proto.Unmarshal(out, t); err != nil {
		return nil, err
	}
	return t, nil
}

// appendFiltered appends to *out field num holding the fields of the
// message value that keep accepts.
func appendFiltered(out *[]byte, num protowire.Number, value []byte, keep func(protowire.Number) bool) error {
	var kept []byte
	err := eachField(value, func(n protowire.Number, field, _ []byte) error {
		if keep(n) {
			kept = append(kept, field...)
		}
		return nil
	})
	if err != nil {
		return err
	}
	*out = protowire.AppendTag(*out, num, protowire.BytesType)
	*out = protowire.AppendBytes(*out, kept)
	return nil
}

// eachField calls fn for every field of an encoded message, in order, with
// its whole encoding (tag included) and, for a length-delimited field, its
// contents (value, never nil; nil for other wire types).
func eachField(b []byte, fn func(num protowire.Number, field, value []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return protowire.ParseError(m)
		}
		var value []byte
		if typ == protowire.BytesType {
			v, k := protowire.ConsumeBytes(b[n:])
			if k < 0 {
				return protowire.ParseError(k)
			}
			value = v
			if value == nil {
				value = []byte{}
			}
		}
		if err := fn(num, b[:n+m], value); err != nil {
			return err
		}
		b = b[n+m:]
	}
	return nil
}
