package agentsdk

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sony/gobreaker/v2"
)

// ErrCircuitOpen is returned by Breaker.Do while the circuit is open: the
// remote service failed repeatedly and calls are refused without trying.
// It is transient (not Permanent): the step may be retried later.
var ErrCircuitOpen = errors.New("agentsdk: circuit open")

// BreakerSettings configures a Breaker. Zero fields take the documented defaults.
type BreakerSettings struct {
	// ConsecutiveFailures opens the circuit; default 5.
	ConsecutiveFailures uint32
	// OpenTimeout is how long the circuit stays open before letting trial
	// calls through (half-open); default 10s.
	OpenTimeout time.Duration
	// HalfOpenRequests is how many trial calls half-open allows; default 1.
	HalfOpenRequests uint32
	// Interval clears the failure counts while closed; default never.
	Interval time.Duration
}

// Breaker is a circuit breaker (github.com/sony/gobreaker/v2) for calls from
// an agent to one remote service, the pattern's answer to faults that take a
// while to heal. Safe for concurrent use by all of an agent's handlers.
type Breaker struct {
	cb *gobreaker.CircuitBreaker[struct{}]
}

// NewBreaker returns a closed breaker named name.
func NewBreaker(name string, s BreakerSettings) *Breaker {
	if s.ConsecutiveFailures == 0 {
		s.ConsecutiveFailures = 5
	}
	if s.OpenTimeout == 0 {
		s.OpenTimeout = 10 * time.Second
	}
	if s.HalfOpenRequests == 0 {
		s.HalfOpenRequests = 1
	}
	return &Breaker{cb: gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        name,
		MaxRequests: s.HalfOpenRequests,
		Interval:    s.Interval,
		Timeout:     s.OpenTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= s.ConsecutiveFailures },
		// A permanent error is the caller's fault, not the service's health.
		IsSuccessful: func(err error) bool { return err == nil || IsPermanent(err) },
	})}
}

// Do calls fn unless the circuit is open, in which case it returns an error
// wrapping ErrCircuitOpen without calling fn.
func (b *Breaker) Do(ctx context.Context, fn func(context.Context) error) error {
	_, err := b.cb.Execute(func() (struct{}, error) { return struct{}{}, fn(ctx) })
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return fmt.Errorf("%w (%s: %v)", ErrCircuitOpen, b.cb.Name(), err)
	}
	return err
}

// Open reports whether the circuit currently refuses calls.
func (b *Breaker) Open() bool { return b.cb.State() == gobreaker.StateOpen }
