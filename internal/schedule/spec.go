package schedule

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/reeve-org/reeve/internal/workflow"
)

// Limits of a spec.
const (
	// MinInterval is the shortest interval of an `every` spec.
	MinInterval = time.Second
	// MaxInterval is the longest interval of an `every` spec (a year).
	MaxInterval = 366 * 24 * time.Hour
	// MaxJitter bounds a spec's jitter.
	MaxJitter = 24 * time.Hour
	// maxSteps bounds the wall-clock candidates one Next examines: a cron
	// that matches every minute walks at most 60 of them through a repeated
	// hour; a spec that matches nothing in that many years ends there.
	maxSteps = 10_000
)

// Spec says when a schedule fires. Exactly one of Cron and Every is set.
type Spec struct {
	// Cron is a standard 5-field cron expression (minute hour
	// day-of-month month day-of-week) or a descriptor: @yearly
	// (@annually), @monthly, @weekly, @daily (@midnight), @hourly. Its
	// fields are read as wall-clock time in Zone; see Calendar.Next for the
	// hours a DST change skips or repeats. "@every" and "TZ=" prefixes are
	// refused: use Every and Zone.
	Cron string
	// Every is an interval of at least MinInterval in whole seconds: the
	// schedule fires at the instants t with (t - Offset) a multiple of
	// Every since the Unix epoch. An interval is absolute time: Zone does
	// not move it and a DST change does not stretch it.
	Every time.Duration
	// Offset shifts an Every spec, 0 <= Offset < Every, in whole seconds:
	// every 1h with offset 15m fires at :15 past each hour (UTC).
	Offset time.Duration
	// Zone is an IANA time zone name ("Europe/Berlin"); "" is UTC.
	Zone string
	// Start and End bound the nominal times, both inclusive; zero is
	// unbounded.
	Start, End time.Time
	// Jitter delays each firing by a pseudo-random duration in [0,
	// Jitter), the same for the same (schedule, nominal time) on every
	// firer (Calendar.Jitter); 0 is none. The nominal time, and so the
	// task id, is not moved.
	Jitter time.Duration
}

// Calendar is a compiled Spec: it answers the nominal times. It is
// immutable and safe for concurrent use.
type Calendar struct {
	spec Spec
	cron *cron.SpecSchedule // nil for an Every spec; its location is UTC (wall clock as if UTC)
	loc  *time.Location
}

// parser accepts 5 fields and descriptors (robfig/cron's standard parser).
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Compile checks s and returns its calendar. An error is a
// *workflow.FieldError naming the field under prefix (e.g. "schedule.spec").
func Compile(prefix string, s Spec) (*Calendar, error) {
	c := &Calendar{spec: s, loc: time.UTC}
	f := func(name string) string { return prefix + "." + name }
	switch {
	case s.Cron != "" && s.Every != 0:
		return nil, fieldErr(f("cron"), "set either cron or every, not both")
	case s.Cron == "" && s.Every == 0:
		return nil, fieldErr(f("cron"), "required: a cron expression or an interval (every)")
	case s.Cron != "":
		expr := strings.TrimSpace(s.Cron)
		if strings.HasPrefix(expr, "@every") {
			return nil, fieldErr(f("cron"), "%q: use every for an interval", expr)
		}
		if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
			return nil, fieldErr(f("cron"), "%q: set the zone in zone, not in the expression", expr)
		}
		sch, err := parser.Parse(expr)
		if err != nil {
			return nil, fieldErr(f("cron"), "%q: %v", expr, err)
		}
		spec, ok := sch.(*cron.SpecSchedule)
		if !ok {
			return nil, fieldErr(f("cron"), "%q: not a calendar expression", expr)
		}
		spec.Location = time.UTC
		c.cron = spec
		if s.Offset != 0 {
			return nil, fieldErr(f("offset"), "only an interval (every) takes an offset")
		}
	default:
		if s.Every < MinInterval || s.Every > MaxInterval || s.Every%time.Second != 0 {
			return nil, fieldErr(f("every"), "%v: an interval is whole seconds from %v to %v", s.Every, MinInterval, MaxInterval)
		}
		if s.Offset < 0 || s.Offset >= s.Every || s.Offset%time.Second != 0 {
			return nil, fieldErr(f("offset"), "%v: whole seconds, at least 0 and less than every (%v)", s.Offset, s.Every)
		}
	}
	if s.Zone != "" {
		loc, err := time.LoadLocation(s.Zone)
		if err != nil || s.Zone == "Local" {
			return nil, fieldErr(f("time_zone"), "%q is not an IANA time zone name", s.Zone)
		}
		c.loc = loc
	}
	if !s.Start.IsZero() && !s.End.IsZero() && s.End.Before(s.Start) {
		return nil, fieldErr(f("end_time"), "before start_time")
	}
	if s.Jitter < 0 || s.Jitter > MaxJitter {
		return nil, fieldErr(f("jitter"), "%v: from 0 to %v", s.Jitter, MaxJitter)
	}
	return c, nil
}

func fieldErr(field, format string, args ...any) error {
	return &workflow.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Spec returns the spec the calendar was compiled from.
func (c *Calendar) Spec() Spec { return c.spec }

// Location returns the calendar's zone (UTC for none).
func (c *Calendar) Location() *time.Location { return c.loc }

// Next returns the first nominal time strictly after after, and false when
// there is none (past End, or a cron that never matches again). Times are
// truncated to the second.
//
// A cron expression is matched against the wall clock of the zone, and
// each matching wall-clock time is one nominal time, with two rules for a
// DST change:
//   - A wall-clock time the change skips (02:30 on the night clocks go
//     from 02:00 to 03:00) fires at the first instant after the gap (03:00
//     new time), once: several skipped times, and a time that matches the
//     first instant itself, are one nominal time.
//   - A wall-clock time the change repeats (01:30 on the night clocks go
//     back from 02:00 to 01:00) fires once, at its first occurrence.
//
// So a daily 02:30 job runs every day, at 03:00 on the day of the spring
// change, and exactly once on the day of the autumn change.
func (c *Calendar) Next(after time.Time) (time.Time, bool) {
	after = after.Truncate(time.Second)
	if start := c.spec.Start; !start.IsZero() {
		// The first nominal time at or after Start is the first after the
		// second before Start (rounded up to a whole second).
		first := start.Truncate(time.Second)
		if first.Before(start) {
			first = first.Add(time.Second)
		}
		if before := first.Add(-time.Second); after.Before(before) {
			after = before
		}
	}
	var t time.Time
	if c.cron == nil {
		t = c.nextEvery(after)
	} else {
		var ok bool
		if t, ok = c.nextCron(after); !ok {
			return time.Time{}, false
		}
	}
	if !c.spec.End.IsZero() && t.After(c.spec.End) {
		return time.Time{}, false
	}
	return t, true
}

// NextN returns up to n nominal times after after.
func (c *Calendar) NextN(after time.Time, n int) []time.Time {
	var out []time.Time
	for range n {
		t, ok := c.Next(after)
		if !ok {
			break
		}
		out = append(out, t)
		after = t
	}
	return out
}

func (c *Calendar) nextEvery(after time.Time) time.Time {
	every, off := int64(c.spec.Every/time.Second), int64(c.spec.Offset/time.Second)
	s := after.Unix() - off
	k := s / every
	if s < 0 && s%every != 0 {
		k-- // floor for times before the epoch
	}
	return time.Unix((k+1)*every+off, 0).UTC()
}

// nextCron walks the wall-clock times that match the expression, read as
// UTC (a "floating" clock without DST), from after's wall clock on, and maps
// each to its instant in the zone (instant) until one is after after. The
// mapping is monotone, and it maps after's own wall clock to at most after,
// so the first such instant is the answer.
func (c *Calendar) nextCron(after time.Time) (time.Time, bool) {
	w := floating(after.In(c.loc))
	for range maxSteps {
		w = c.cron.Next(w)
		if w.IsZero() {
			return time.Time{}, false
		}
		if t := instant(w, c.loc); t.After(after) {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

// floating returns t's wall clock as the same wall clock in UTC.
func floating(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
}

// instant returns the instant of wall-clock time w (a floating time) in
// loc: for a time in a DST gap, the first instant after the gap; for a
// repeated time, its first occurrence. time.Date itself chooses either
// side, differently per zone.
func instant(w time.Time, loc *time.Location) time.Time {
	t := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), 0, loc)
	switch got := floating(t); {
	case got.After(w): // in a gap, normalized forward: the gap ends where t's zone starts
		start, _ := t.ZoneBounds()
		return start
	case got.Before(w): // in a gap, normalized backward: the gap ends where t's zone ends
		_, end := t.ZoneBounds()
		return end
	}
	// A repeated time: the occurrence in the zone before t's, if that zone
	// also shows w (time.Date may have chosen the second occurrence).
	start, _ := t.ZoneBounds()
	if start.IsZero() {
		return t
	}
	_, prevOff := start.Add(-time.Nanosecond).Zone()
	if early := w.Add(-time.Duration(prevOff) * time.Second); early.Before(start) && floating(early.In(loc)).Equal(w) {
		return early.In(loc)
	}
	return t
}

// Jitter returns the delay of the firing of nominal time t of schedule
// name in namespace ns: in [0, Spec.Jitter), from a hash of the three, so
// every firer computes the same.
func (c *Calendar) Jitter(ns, name string, t time.Time) time.Duration {
	if c.spec.Jitter <= 0 {
		return 0
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%s/%d", ns, name, t.Unix())
	return time.Duration(h.Sum64() % uint64(c.spec.Jitter))
}
