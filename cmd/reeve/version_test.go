package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

// TestContractVersionJSON: scripts read "version", "commit" and
// "go_version" from `reeve version -o json`; no scheduler is needed.
func TestContractVersionJSON(t *testing.T) {
	code, out, errOut := reeve(t, "127.0.0.1:1", "version", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var v map[string]string
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	for _, k := range []string{"version", "commit", "go_version", "platform"} {
		if v[k] == "" {
			t.Errorf("%q is empty or missing in %s", k, out)
		}
	}
	if v["go_version"] != runtime.Version() {
		t.Errorf("go_version = %q, want %q", v["go_version"], runtime.Version())
	}
}

func TestVersionTable(t *testing.T) {
	code, out, errOut := reeve(t, "127.0.0.1:1", "version")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"VERSION:", "COMMIT:", "GO:", runtime.Version()} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code, _, _ := reeve(t, "127.0.0.1:1", "version", "extra"); code != exitUsage {
		t.Errorf("reeve version extra: exit %d, want %d", code, exitUsage)
	}
}
