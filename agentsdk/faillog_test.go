package agentsdk_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/internal/testenv"
)

// Every failed step is logged at WARN with its code, step type, task,
// attempt and message: an error a handler returns, a handler's panic, and
// a typed handler's input that does not decode.
func TestFailedStepsAreLoggedWithTheirCode(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	logs := make(logRecords, 256)
	a := newAgent(t, []string{s.Addr}, agentsdk.WithLogger(slog.New(logs)))
	a.Handle("onboard.coded", func(context.Context, *agentsdk.Step) (any, error) {
		return nil, &agentsdk.Error{Code: "insufficient_funds", Message: "no money", NonRetryable: true}
	})
	a.Handle("onboard.plain", func(context.Context, *agentsdk.Step) (any, error) {
		return nil, agentsdk.Permanent(errors.New("card declined"))
	})
	a.Handle("onboard.panics", func(context.Context, *agentsdk.Step) (any, error) { panic("boom") })
	a.Handle("onboard.typed", agentsdk.Typed(func(context.Context, *agentsdk.Step, numericOrder) (any, error) { return nil, nil }))
	runAgent(t, a)
	c := s.Client(t)
	want := map[string]struct{ code, message string }{
		"onboard.coded":  {"insufficient_funds", "no money"},
		"onboard.plain":  {"", "card declined"},
		"onboard.panics": {"panic", "handler panicked: boom"},
		"onboard.typed":  {"bad_input", "agentsdk: decode input"},
	}
	for typ := range want {
		submit(t, c, strings.TrimPrefix(typ, "onboard."), spec("x", typ, 10*time.Second))
	}
	deadline := time.After(wait)
	for len(want) > 0 {
		select {
		case m := <-logs:
			w, ok := want[m["type"]]
			if m["msg"] != "step failed" || !ok {
				continue
			}
			task := strings.TrimPrefix(m["type"], "onboard.")
			if m["level"] != "WARN" || m["code"] != w.code || !strings.Contains(m["message"], w.message) || m["task_id"] != task || m["step"] != "x" || m["attempt"] != "1" {
				t.Fatalf("logged %v; want WARN with code %q, task %s, step x, attempt 1 and a message with %q", m, w.code, task, w.message)
			}
			delete(want, m["type"])
		case <-deadline:
			t.Fatalf("no 'step failed' line for %v", want)
		}
	}
}
