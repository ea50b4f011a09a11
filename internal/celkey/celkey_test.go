package celkey_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reeve-org/reeve/internal/celkey"
)

func TestCompileErrorsNamePosition(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"", "required"},
		{"input.customer_id +", "line 1, column 20: "},
		{"input.a &&\n  )", "line 2, column 3: "},
		{"nosuch.x", "line 1, column 1: undeclared reference to 'nosuch'"},
		{"[1, 2]", "line 1, column 1: gives list(int); a key must be a string, a number or a bool"},
		{strings.Repeat("a", 1025), "1025 bytes, more than the limit of 1024"},
	} {
		_, err := celkey.Compile(tc.expr)
		var ce *celkey.Error
		if !errors.As(err, &ce) || !strings.HasPrefix(ce.Error(), tc.want) {
			t.Errorf("%q: %v; want an error starting %q", tc.expr, err, tc.want)
		}
	}
}

func TestKey(t *testing.T) {
	in, err := structpb.NewValue(map[string]any{"customer_id": "c-42", "n": 7.0, "vip": true, "tenant": map[string]any{"id": 3.0}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ expr, want string }{
		{"input.customer_id", "c-42"},
		{"input.n", "7"},
		{"input.vip", "true"},
		{`"t-" + string(int(input.tenant.id))`, "t-3"},
		{`input.customer_id.startsWith("c") ? "c" : "other"`, "c"},
	} {
		p, err := celkey.Compile(tc.expr)
		if err != nil {
			t.Fatalf("%q: %v", tc.expr, err)
		}
		if got, err := p.Key(in); err != nil || got != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.expr, got, err, tc.want)
		}
	}
	// A missing field, a list result at run time, a runaway comprehension.
	for _, expr := range []string{"input.missing", "input.tenant", `[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, a+b+c+d > 0)))) ? "x" : "y"`} {
		p, err := celkey.Compile(expr)
		if err != nil {
			t.Fatalf("%q: %v", expr, err)
		}
		if _, err := p.Key(in); !errors.Is(err, celkey.ErrEval) {
			t.Errorf("%q: %v; want ErrEval", expr, err)
		}
	}
}
