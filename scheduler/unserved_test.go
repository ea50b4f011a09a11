package scheduler_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// warnRecords is a slog.Handler that hands each WARN record's message and
// attributes to a channel (records that find it full are not kept).
type warnRecords chan map[string]string

func (w warnRecords) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w warnRecords) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w warnRecords) WithGroup(string) slog.Handler                { return w }
func (w warnRecords) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	select {
	case w <- m:
	default:
	}
	return nil
}

// A step queued for a type no agent of its namespace serves is logged at
// WARN, with the nearest type agents serve, once: not again while it stays
// queued, nor for a type an agent serves.
func TestSchedulerWarnsOnceOfAQueuedTypeNoAgentServes(t *testing.T) {
	logs := make(warnRecords, 64)
	s := testenv.New(t).StartScheduler("", scheduler.WithLogger(slog.New(logs)))
	c := s.Client(t)
	agent := testenv.ConnectRaw(t, s.Addr, register("onboarder", 4, "onboard.create_billing_customr"))
	defer agent.Close()
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "t-1", Workflow: inline(step("create_billing", "onboard.create_billing_customer"))})
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "t-2", Workflow: inline(step("create_billing", "onboard.create_billing_customer"))})

	const want = "no agent serves onboard.create_billing_customer; agents serve onboard.create_billing_customr"
	deadline := time.After(wait)
	for found := false; !found; {
		select {
		case m := <-logs:
			if m["type"] != "onboard.create_billing_customer" {
				continue
			}
			if m["detail"] != want || m["namespace"] != "default" {
				t.Fatalf("logged %v; want the namespace default and %q", m, want)
			}
			found = true
		case <-deadline:
			t.Fatal("no WARN naming the type no agent serves")
		}
	}
	// Once: the next looks (every 2 s) do not name it again.
	quiet := time.After(5 * time.Second)
	for {
		select {
		case m := <-logs:
			if m["type"] == "onboard.create_billing_customer" {
				t.Fatalf("logged the same type again: %v", m)
			}
		case <-quiet:
			return
		}
	}
}
