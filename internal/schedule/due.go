package schedule

import "time"

// DefaultCatchUpWindow is how far back a missed nominal time still runs
// when a schedule has no catch-up window of its own.
const DefaultCatchUpWindow = time.Minute

// maxMissedWalk bounds the missed times Due counts one by one; past it
// Missed.More is set and the walk jumps to the window.
const maxMissedWalk = 10_000

// Plan is what is due of one schedule at one moment (Calendar.Due).
type Plan struct {
	// Run are the nominal times to start now, oldest first: due (their
	// firing time, nominal time plus jitter, has come) and inside the
	// catch-up window.
	Run []time.Time
	// Missed summarizes the due nominal times older than the catch-up
	// window: they do not run.
	Missed Missed
	// Last is the time up to which nominal times are handled: the last
	// time run or missed (after a jump over uncounted missed times, the
	// second before the window), or the caller's last when the plan covers
	// none. The next Due starts after it.
	Last time.Time
	// Next is the first nominal time after Last, HasNext false when there
	// is none (the spec ended); Fire is its firing time (Next plus its
	// jitter), when the schedule is due again. Fire may be at or before
	// now when Run was cut at max.
	Next, Fire time.Time
	HasNext    bool
}

// Missed is a run of consecutive nominal times that were not started.
type Missed struct {
	First, Last time.Time
	// Count is how many; More is set when there were more than counted
	// (a long outage of a frequent schedule).
	Count int
	More  bool
}

// Due returns the plan of schedule name in namespace ns whose times up to
// last are handled, at now: the nominal times after last whose firing time
// is at or before now, split by the catch-up window (a time older than now
// minus window is missed), at most max of them to run. Times are taken in
// nominal order and the first not yet due stops the walk, so a jitter
// longer than the interval delays the times behind it.
func (c *Calendar) Due(ns, name string, last, now time.Time, window time.Duration, max int) Plan {
	p := Plan{Last: last}
	oldest := now.Add(-window)
	walked := 0
	after := last
	for {
		t, ok := c.Next(after)
		if !ok {
			return p
		}
		fire := t.Add(c.Jitter(ns, name, t))
		if fire.After(now) {
			p.Next, p.Fire, p.HasNext = t, fire, true
			return p
		}
		if t.Before(oldest) {
			if p.Missed.Count == 0 {
				p.Missed.First = t
			}
			p.Missed.Last, p.Last = t, t
			p.Missed.Count++
			walked++
			after = t
			if walked == maxMissedWalk {
				// Jump to the window: the times in between are missed too,
				// uncounted.
				jump := oldest.Add(-time.Nanosecond).Truncate(time.Second)
				if t2, ok := c.Next(after); ok && t2.Before(oldest) && jump.After(after) {
					p.Missed.More = true
					after, p.Last = jump, jump
				}
				walked = 0
			}
			continue
		}
		if len(p.Run) == max {
			p.Next, p.Fire, p.HasNext = t, fire, true
			return p
		}
		p.Run = append(p.Run, t)
		p.Last, after = t, t
	}
}

// Passed summarizes the nominal times after last that came by now (their
// firing time is at or before now): those a paused schedule let pass.
func (c *Calendar) Passed(ns, name string, last, now time.Time) Missed {
	return c.Due(ns, name, last, now, -time.Nanosecond, 0).Missed
}
