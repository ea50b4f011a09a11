// Package schedule is the calendar arithmetic of Reeve's schedules, free of
// I/O: a Spec (a cron expression or an interval, a zone, bounds, jitter)
// compiles to a Calendar that answers the nominal times (Next, NextN) and
// what is due at a moment (Due: what runs, what the catch-up window
// misses); Overlap decides what a due time does while a run is active;
// TaskID names the task of a nominal time.
//
//	cal, err := schedule.Compile("spec", schedule.Spec{Cron: "30 2 * * *", Zone: "Europe/Berlin"})
//	if err != nil { ... } // a *workflow.FieldError naming spec.cron, spec.zone, ...
//	next := cal.NextN(time.Now(), 5)
//	id := schedule.TaskID("nightly", next[0]) // sched-nightly-20261130T013000Z
//
// DST: a cron's wall-clock time that a change skips fires once at the first
// instant after the gap; a repeated one fires once, at its first
// occurrence (Calendar.Next). An interval is absolute time.
package schedule
