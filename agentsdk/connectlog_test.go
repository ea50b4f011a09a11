package agentsdk_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/reeve-org/reeve/agentsdk"
)

// logRecords is a slog.Handler that hands each record's message, level
// (key "level") and attributes to a channel (records that find it full are not kept).
type logRecords chan map[string]string

func (l logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l logRecords) WithGroup(string) slog.Handler            { return l }
func (l logRecords) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message, "level": r.Level.String()}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	select {
	case l <- m:
	default:
	}
	return nil
}

// An agent that never reached its scheduler says so, with the address and
// the cause, once per attempt — not that a stream ended.
func TestAgentThatCannotConnectSaysSo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	logs := make(logRecords, 64)
	a := newAgent(t, []string{addr}, agentsdk.WithLogger(slog.New(logs)), agentsdk.WithReconnectBackoff(time.Millisecond, 10*time.Millisecond))
	a.Handle("work", func(ctx context.Context, st *agentsdk.Step) (any, error) { return nil, nil })
	stop := runAgent(t, a)
	attempts := 0
	deadline := time.After(wait)
	for attempts < 2 {
		select {
		case m := <-logs:
			if strings.Contains(m["msg"], "stream ended") {
				t.Fatalf("logged %v for a stream that never opened", m)
			}
			if m["msg"] != "cannot connect to scheduler" {
				continue
			}
			if m["address"] != addr || !strings.Contains(m["err"], "connection refused") || m["retry_in"] == "" {
				t.Fatalf("logged %v; want the address %s, the cause (connection refused) and the retry delay", m, addr)
			}
			attempts++
		case <-deadline:
			t.Fatalf("%d 'cannot connect to scheduler' lines, want one per attempt", attempts)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
