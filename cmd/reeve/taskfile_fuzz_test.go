package main

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// FuzzParseWorkflowFile feeds arbitrary task files, as YAML and as JSON, to
// the CLI's parser: it never panics, refuses with a usage error (exit code
// 2), and what it accepts survives a protojson round trip.
func FuzzParseWorkflowFile(f *testing.F) {
	f.Add(true, []byte("name: w\nsteps:\n  - name: a\n    type: t\n    timeout: 5s\n"))
	f.Add(false, []byte(`{"name":"w","steps":[{"name":"a","type":"t","dependsOn":[]}]}`))
	f.Add(true, []byte("a: &a [*a]\n"))
	f.Add(true, []byte("name: !!binary AAAA\n"))
	f.Add(false, []byte(`{"name":"w","unknown":1}`))
	f.Add(true, []byte("name: w\nsteps:\n  - name: a\n    type: t\n    timeout: 2m\n    escalation: compensate\n"))
	f.Add(true, []byte("name: w\nsteps:\n  - name: a\n    type: t\n    timeout: 10\n"))
	f.Add(false, []byte(`{"name":"w","steps":[{"name":"a","type":"t","escalation":2,"retryPolicy":{"maxAttempts":1e3}}]}`))
	f.Fuzz(func(t *testing.T, yaml bool, b []byte) {
		path := "wf.json"
		if yaml {
			path = "wf.yaml"
		}
		w, err := parseWorkflow(path, b)
		if err != nil {
			var u usageError
			if !errors.As(err, &u) {
				t.Fatalf("refusal %v is not a usage error", err)
			}
			return
		}
		j, err := protojson.Marshal(w)
		if err != nil {
			t.Fatalf("accepted workflow does not marshal: %v", err)
		}
		back := &reevev1.Workflow{}
		if err := protojson.Unmarshal(j, back); err != nil || !proto.Equal(w, back) {
			t.Fatalf("round trip of %s: %v", j, err)
		}
	})
}

// FuzzParseInput feeds arbitrary --input values.
func FuzzParseInput(f *testing.F) {
	for _, s := range []string{`{"order_id":"o-1"}`, `[1,2,{"a":null}]`, `1e400`, `"\ud800"`, `{"a":`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseInput(s)
		if err != nil {
			var u usageError
			if !errors.As(err, &u) {
				t.Fatalf("refusal %v is not a usage error", err)
			}
			return
		}
		if s != "" && v == nil {
			t.Fatalf("input %q accepted as nothing", s)
		}
	})
}
