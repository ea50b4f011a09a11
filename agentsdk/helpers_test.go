package agentsdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/reeve-org/reeve/agentsdk"
)

func TestRetryStopsOnSuccessPermanentOrDeadline(t *testing.T) {
	transient := errors.New("503")
	cases := []struct {
		name      string
		results   []error
		deadline  time.Duration
		wantCalls int
		wantErr   error
	}{
		{"succeeds after transient errors", []error{transient, transient, nil}, time.Minute, 3, nil},
		{"permanent stops at once", []error{agentsdk.Permanent(transient)}, time.Minute, 1, transient},
		{"attempts exhausted", []error{transient, transient, transient}, time.Minute, 3, transient},
		{"never waits past the deadline", []error{transient, transient, transient}, time.Millisecond, 1, transient},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
			defer cancel()
			calls := 0
			policy := agentsdk.RetrySettings{MaxAttempts: 3, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
			if tc.name == "never waits past the deadline" {
				policy.InitialBackoff, policy.MaxBackoff = time.Hour, time.Hour
			}
			err := agentsdk.Retry(ctx, policy, func(context.Context) error {
				calls++
				return tc.results[calls-1]
			})
			if calls != tc.wantCalls || !errors.Is(err, tc.wantErr) && !(err == nil && tc.wantErr == nil) {
				t.Fatalf("%d calls, err %v; want %d calls, err %v", calls, err, tc.wantCalls, tc.wantErr)
			}
		})
	}
}

func TestBreakerOpensAndIgnoresPermanentErrors(t *testing.T) {
	b := agentsdk.NewBreaker("payments", agentsdk.BreakerSettings{ConsecutiveFailures: 2, OpenTimeout: time.Hour})
	ctx := context.Background()
	for range 5 {
		_ = b.Do(ctx, func(context.Context) error { return agentsdk.Permanent(errors.New("bad card")) })
	}
	if b.Open() {
		t.Fatal("permanent errors opened the circuit")
	}
	for range 2 {
		_ = b.Do(ctx, func(context.Context) error { return errors.New("503") })
	}
	called := false
	err := b.Do(ctx, func(context.Context) error { called = true; return nil })
	if !errors.Is(err, agentsdk.ErrCircuitOpen) || called || agentsdk.IsPermanent(err) {
		t.Fatalf("after 2 failures: err %v, called %v; want ErrCircuitOpen (transient) without a call", err, called)
	}
}
