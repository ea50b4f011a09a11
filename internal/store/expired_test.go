package store_test

import (
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// NextDeadline finds the head of the deadline index after a time, within
// an optional horizon: a deadline past the horizon is not reported (the
// supervisor bounds the range so that etcd does not visit every future
// deadline to count them), and without a horizon it is.
func TestNextDeadlineWithinAHorizon(t *testing.T) {
	s, _ := newStore(t)
	// Step a of t1 is due at t0+1m, of t2 at t0+11m (both have a 1m timeout).
	for i, id := range []string{"t1", "t2"} {
		if _, _, err := s.CreateTask(ctx(t), record(id)); err != nil {
			t.Fatal(err)
		}
		at := t0.Add(time.Duration(i) * 10 * time.Minute)
		if _, _, err := s.UpdateTask(ctx(t), "default", id, func(task *reevev1.Task) error {
			return taskstate.Claim(task, "a", 1, "s", "agent", at)
		}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name       string
		now, until time.Time
		want       time.Time // zero: none
	}{
		{"head within the horizon", t0, t0.Add(5 * time.Minute), t0.Add(time.Minute)},
		{"next one past the horizon", t0.Add(2 * time.Minute), t0.Add(5 * time.Minute), time.Time{}},
		{"no horizon", t0.Add(2 * time.Minute), time.Time{}, t0.Add(11 * time.Minute)},
		{"horizon at the deadline itself", t0.Add(2 * time.Minute), t0.Add(11 * time.Minute), t0.Add(11 * time.Minute)},
	}
	for _, tc := range cases {
		at, ok, rev, err := s.NextDeadline(ctx(t), tc.now, tc.until)
		if err != nil || rev == 0 {
			t.Fatalf("%s: %v (revision %d)", tc.name, err, rev)
		}
		if ok != !tc.want.IsZero() || !at.Equal(tc.want) {
			t.Errorf("%s: got %v (ok %v), want %v", tc.name, at, ok, tc.want)
		}
	}
}
