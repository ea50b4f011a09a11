package scheduler

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/reeve-org/reeve/internal/store"
)

// Defect 11: "etcd out of space" was logged once per claim, 1.29 million
// times. One line per kind of failure per interval goes through, the next
// one carries how many were dropped, and another kind is not held back.
func TestRepeatedLogLinesAreRateLimitedWithASuppressedCount(t *testing.T) {
	clock := clockwork.NewFakeClock()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	l := newLogLimiter(clock, 10*time.Second)
	nospace := fmt.Errorf("write task: %w", store.ErrNoSpace)
	for i := range 1000 {
		l.log(log, slog.LevelWarn, "claim step: "+errKind(nospace), "claim step", "task_id", fmt.Sprint(i), "err", nospace)
	}
	l.log(log, slog.LevelWarn, "claim step: "+errKind(store.ErrUnavailable), "claim step", "err", store.ErrUnavailable)
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Fatalf("%d lines for 1000 identical failures and one other, want 2:\n%s", n, buf.String())
	}
	clock.Advance(10 * time.Second)
	l.log(log, slog.LevelWarn, "claim step: "+errKind(nospace), "claim step", "err", nospace)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "suppressed=999") {
		t.Fatalf("line after the interval: %q, want suppressed=999", lines[len(lines)-1])
	}
}
