package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/reeve-org/reeve/internal/store"
)

// logLimiter lets one log line per key through per interval and counts the
// ones it drops; the next line of that key carries the count
// ("suppressed"). A failure that hits every claim (etcd out of space, etcd
// unavailable) then costs a few lines a minute instead of one per claim
// (1.29 million lines, 215 MB, in one NOSPACE incident).
type logLimiter struct {
	clock    clockwork.Clock
	interval time.Duration
	mu       sync.Mutex
	keys     map[string]*limitedKey
}

type limitedKey struct {
	last       time.Time
	suppressed int
}

// maxLimitedKeys bounds the keys a limiter remembers; past it, keys whose
// interval ended are forgotten.
const maxLimitedKeys = 1024

func newLogLimiter(clock clockwork.Clock, interval time.Duration) *logLimiter {
	return &logLimiter{clock: clock, interval: interval, keys: map[string]*limitedKey{}}
}

// allow reports whether a line of key may be logged now, and how many were
// suppressed since the last one.
func (l *logLimiter) allow(key string) (ok bool, suppressed int) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys[key]
	if k == nil {
		if len(l.keys) >= maxLimitedKeys {
			for name, o := range l.keys {
				if now.Sub(o.last) >= l.interval {
					delete(l.keys, name)
				}
			}
		}
		l.keys[key] = &limitedKey{last: now}
		return true, 0
	}
	if now.Sub(k.last) < l.interval {
		k.suppressed++
		return false, 0
	}
	n := k.suppressed
	k.last, k.suppressed = now, 0
	return true, n
}

// log writes the line at level unless a line of key was written within the
// interval; key should name the kind of failure, not the task.
func (l *logLimiter) log(log *slog.Logger, level slog.Level, key, msg string, args ...any) {
	ok, n := l.allow(key)
	if !ok {
		return
	}
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	log.Log(context.Background(), level, msg, args...)
}

// errKind names the class of a store error for rate-limited logging: the
// same failure of many tasks shares one key.
func errKind(err error) string {
	for _, e := range []error{store.ErrNoSpace, store.ErrUnavailable, store.ErrTooManyOps, store.ErrTooLarge, store.ErrConflict, store.ErrFenced, store.ErrOverloaded, store.ErrUnknownVersion} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "other"
}
