package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/internal/workflow"
)

// fileError is a mistake in a file named on the command line: its line
// (0 when unknown), the field path as written (steps[0].timeout) and what
// is wrong, with the accepted values or format. It is a usage error without
// the --help hint, which cannot help.
type fileError struct {
	path  string
	line  int
	field string
	msg   string
}

func (e *fileError) Error() string {
	var b strings.Builder
	b.WriteString("-f " + e.path)
	if e.line > 0 {
		fmt.Fprintf(&b, ":%d", e.line)
	}
	if e.field != "" {
		b.WriteString(": " + e.field)
	}
	return b.String() + ": " + e.msg
}

// normalizeFile checks the JSON j (the file b converted) against the
// message md field by field, and rewrites what protojson would refuse but a
// person means: enum values in short or any-case form (`compensate`,
// `Compensate` for ESCALATION_COMPENSATE) and durations in Go's form
// (`2m`, `1h30m` for "120s", "5400s"). A mistake is a *fileError with the
// line of the field in b.
func normalizeFile(path string, b, j []byte, md protoreflect.MessageDescriptor) ([]byte, error) {
	if !utf8.Valid(j) {
		return nil, &fileError{path: path, msg: "not valid UTF-8"}
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		fe := &fileError{path: path, msg: err.Error()}
		var se *json.SyntaxError
		if errors.As(err, &se) && bytes.Equal(b, j) {
			fe.line = 1 + bytes.Count(j[:min(int(se.Offset), len(j))], []byte("\n"))
		}
		return nil, fe
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &fileError{path: path, msg: "more than one value: want one workflow"}
	}
	doc, err := checkMessage(doc, md, nil)
	if err != nil {
		err.path, err.line = path, lineOf(b, err.at)
		return nil, &err.fileError
	}
	return json.Marshal(doc)
}

// pathErr is a fileError before its line is known: at is the path of the
// field as keys (string) and indexes (int).
type pathErr struct {
	fileError
	at []any
}

func failAt(at []any, format string, args ...any) *pathErr {
	return &pathErr{fileError: fileError{field: fieldPath(at), msg: fmt.Sprintf(format, args...)}, at: slices.Clone(at)}
}

func fieldPath(at []any) string {
	var b strings.Builder
	for _, p := range at {
		switch p := p.(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", p)
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(p)
		}
	}
	return b.String()
}

func checkMessage(v any, md protoreflect.MessageDescriptor, at []any) (any, *pathErr) {
	if v == nil {
		return nil, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, failAt(at, "want an object with the fields %s, got %s", fieldNames(md), describeJSON(v))
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			fd = md.Fields().ByTextName(k)
		}
		if fd == nil {
			return nil, failAt(append(at, k), "unknown field%s (the fields of %s: %s)", workflow.DidYouMean(k, jsonNames(md)), md.Name(), fieldNames(md))
		}
		fv, err := checkField(obj[k], fd, append(at, k))
		if err != nil {
			return nil, err
		}
		obj[k] = fv
	}
	return obj, nil
}

func checkField(v any, fd protoreflect.FieldDescriptor, at []any) (any, *pathErr) {
	switch {
	case v == nil:
		return nil, nil
	case fd.IsList():
		list, ok := v.([]any)
		if !ok {
			return nil, failAt(at, "want a list, got %s", describeJSON(v))
		}
		for i := range list {
			e, err := checkValue(list[i], fd, append(at, i))
			if err != nil {
				return nil, err
			}
			list[i] = e
		}
		return list, nil
	case fd.IsMap():
		m, ok := v.(map[string]any)
		if !ok {
			return nil, failAt(at, "want an object, got %s", describeJSON(v))
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			e, err := checkValue(m[k], fd.MapValue(), append(at, k))
			if err != nil {
				return nil, err
			}
			m[k] = e
		}
		return m, nil
	}
	return checkValue(v, fd, at)
}

// value checks one value of fd's kind (an element, for a list).
func checkValue(v any, fd protoreflect.FieldDescriptor, at []any) (any, *pathErr) {
	if v == nil {
		return nil, nil
	}
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Duration":
			return checkDuration(v, at)
		case "google.protobuf.Value", "google.protobuf.Struct", "google.protobuf.ListValue", "google.protobuf.Timestamp":
			return v, nil // any JSON; protojson checks timestamps
		}
		return checkMessage(v, fd.Message(), at)
	case protoreflect.EnumKind:
		return checkEnum(v, fd.Enum(), at)
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			return nil, failAt(at, "want true or false, got %s", describeJSON(v))
		}
	case protoreflect.StringKind, protoreflect.BytesKind:
		if _, ok := v.(string); !ok {
			return nil, failAt(at, "want a string (quote it: \"%v\"), got %s", v, describeJSON(v))
		}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		switch v.(type) {
		case json.Number, string: // protojson takes "1.5", "NaN"
		default:
			return nil, failAt(at, "want a number, got %s", describeJSON(v))
		}
	default: // the integer kinds
		if s, ok := v.(string); ok {
			if _, err := strconv.ParseInt(s, 10, 64); err == nil {
				return v, nil // protojson takes "3"
			}
		}
		num, ok := v.(json.Number)
		if !ok {
			return nil, failAt(at, "want a whole number, got %s", describeJSON(v))
		}
		// Other forms (1e3) are protojson's to judge.
		if i, err := strconv.ParseInt(num.String(), 10, 64); err == nil && fd.Kind() == protoreflect.Int32Kind && (i < -1<<31 || i > 1<<31-1) {
			return nil, failAt(at, "want a whole number from %d to %d, got %s", -1<<31, 1<<31-1, num)
		}
	}
	return v, nil
}

// duration accepts protojson's form ("10s", "0.5s") and Go's ("2m",
// "1h30m", "250ms"), and gives protojson's.
func checkDuration(v any, at []any) (any, *pathErr) {
	s, ok := v.(string)
	if !ok {
		return nil, failAt(at, "want a duration with its unit, such as \"10s\", \"1.5s\", \"250ms\" or \"2m\", got %s", describeJSON(v))
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return nil, failAt(at, "want a duration with its unit, such as \"10s\", \"1.5s\", \"250ms\" or \"2m\", got %q", s)
	}
	b, err := protojson.Marshal(durationpb.New(d))
	if err != nil {
		return nil, failAt(at, "duration %q out of range", s)
	}
	out, _ := strconv.Unquote(string(b))
	return out, nil
}

// enum accepts a value's full name in any case (ESCALATION_COMPENSATE,
// escalation_compensate), its short form without the enum's prefix
// (compensate, COMPENSATE, wait-then-retry) and its number, and gives the
// full name (or the number).
func checkEnum(v any, ed protoreflect.EnumDescriptor, at []any) (any, *pathErr) {
	if num, ok := v.(json.Number); ok {
		if i, err := strconv.ParseInt(num.String(), 10, 32); err == nil && ed.Values().ByNumber(protoreflect.EnumNumber(i)) != nil {
			return v, nil
		}
	}
	if s, ok := v.(string); ok {
		want := strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
		prefix := enumPrefix(ed)
		for i := range ed.Values().Len() {
			name := string(ed.Values().Get(i).Name())
			if want == name || prefix+want == name {
				return name, nil
			}
		}
	}
	return nil, failAt(at, "want one of %s, got %s", enumNames(ed), describeJSON(v))
}

// enumPrefix is the prefix every value of ed shares by the style guide:
// "ESCALATION_" for Escalation.
func enumPrefix(ed protoreflect.EnumDescriptor) string {
	return strings.TrimSuffix(string(ed.Values().Get(0).Name()), "UNSPECIFIED")
}

// enumNames lists ed's values in short form, lower case, without the
// unspecified one: "fail, compensate or wait_then_retry".
func enumNames(ed protoreflect.EnumDescriptor) string {
	prefix := enumPrefix(ed)
	var names []string
	for i := range ed.Values().Len() {
		if ed.Values().Get(i).Number() == 0 {
			continue
		}
		names = append(names, strings.ToLower(strings.TrimPrefix(string(ed.Values().Get(i).Name()), prefix)))
	}
	return orList(names)
}

func fieldNames(md protoreflect.MessageDescriptor) string {
	return strings.Join(jsonNames(md), ", ")
}

func jsonNames(md protoreflect.MessageDescriptor) []string {
	var names []string
	for i := range md.Fields().Len() {
		names = append(names, md.Fields().Get(i).JSONName())
	}
	return names
}

func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// describeJSON names a decoded JSON value for an error: `10`, `"ten"`, `a list`.
func describeJSON(v any) string {
	switch v := v.(type) {
	case json.Number:
		return v.String()
	case string:
		return strconv.Quote(v)
	case bool:
		return strconv.FormatBool(v)
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprint(v)
}

// lineOf is the line of the value at path at in the YAML or JSON file b
// (JSON is YAML), or 0 if it cannot be told.
func lineOf(b []byte, at []any) int {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil || len(doc.Content) == 0 {
		return 0
	}
	n := doc.Content[0]
	line := n.Line
	for _, p := range at {
		for n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		var next *yaml.Node
		switch p := p.(type) {
		case int:
			if n.Kind == yaml.SequenceNode && p < len(n.Content) {
				next = n.Content[p]
			}
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					// The file may spell a field by its JSON name or its
					// proto name (dependsOn, depends_on).
					if k := n.Content[i].Value; k == p || workflow.JSONName(k) == p {
						next, line = n.Content[i+1], n.Content[i].Line
						break
					}
				}
			}
		}
		if next == nil {
			return line
		}
		n = next
		if _, ok := p.(int); ok {
			line = n.Line
		}
	}
	return line
}
