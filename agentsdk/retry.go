package agentsdk

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// RetrySettings configures Retry: how often a handler calls a remote
// service again within one execution of a step. It is not the step's retry
// policy (the workflow's RetryPolicy, applied by the scheduler between
// attempts). Zero fields take the documented defaults.
type RetrySettings struct {
	// MaxAttempts is the number of calls, including the first; default 5.
	MaxAttempts int
	// InitialBackoff is the wait ceiling before the second call; default 100ms.
	InitialBackoff time.Duration
	// MaxBackoff caps the wait ceiling; default 2s.
	MaxBackoff time.Duration
	// Multiplier grows the ceiling after every call; default 2.
	Multiplier float64
}

// RetryPolicy is the former name of RetrySettings.
//
// Deprecated: use RetrySettings; RetryPolicy, which read as the workflow's
// step retry policy, will be removed in the next release.
type RetryPolicy = RetrySettings

func (p RetrySettings) withDefaults() RetrySettings {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 5
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = 100 * time.Millisecond
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 2 * time.Second
	}
	if p.Multiplier < 1 {
		p.Multiplier = 2
	}
	return p
}

// Retry calls fn until it succeeds, returns a Permanent error, or the policy's
// attempts are used up, waiting a jittered exponential backoff in between
// ("full jitter": a random wait up to the growing ceiling). It never waits
// past ctx's deadline, which in a handler is the step's complete-by: when the
// next wait would cross it, Retry gives up and returns the last error.
func Retry(ctx context.Context, p RetrySettings, fn func(ctx context.Context) error) error {
	p = p.withDefaults()
	var err error
	for attempt := 1; ; attempt++ {
		if err = fn(ctx); err == nil || IsPermanent(err) || attempt >= p.MaxAttempts {
			return err
		}
		ceiling := float64(p.InitialBackoff) * math.Pow(p.Multiplier, float64(attempt-1))
		wait := time.Duration(rand.Float64() * min(ceiling, float64(p.MaxBackoff)))
		if deadline, ok := ctx.Deadline(); ok && time.Now().Add(wait).After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
