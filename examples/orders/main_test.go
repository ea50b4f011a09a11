package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/testenv"
)

func TestExampleChargesEachOrderOnceThroughAFlakyService(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	env.StartSupervisor([]*testenv.Scheduler{s})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"--address", s.Addr, "--submit", "8", "--fail-rate", "0.4", "--seed", "7"}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	if n := strings.Count(text, "TASK_STATE_"); n != 8 {
		t.Fatalf("%d final states printed, want 8:\n%s", n, text)
	}
	m := regexp.MustCompile(`payment service: (\d+) calls, (\d+) distinct charges`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no payment stats:\n%s", text)
	}
	calls, _ := strconv.Atoi(m[1])
	charges, _ := strconv.Atoi(m[2])
	succeeded := strings.Count(text, "TASK_STATE_SUCCEEDED")
	// Every order that succeeded was charged exactly once, however often the
	// flaky service was called.
	if succeeded == 0 || charges < succeeded || charges > 8 || calls <= charges {
		t.Fatalf("%d succeeded, %d calls, %d charges: want each order charged at most once, with retries:\n%s", succeeded, calls, charges, text)
	}
}
