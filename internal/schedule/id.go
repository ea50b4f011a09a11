package schedule

import (
	"fmt"
	"strings"
	"time"
)

// idTimeLayout is the nominal time in a task id: UTC, to the second.
const idTimeLayout = "20060102T150405Z"

// TaskID returns the id of the task a schedule starts for a nominal time:
// "sched-<schedule>-<UTC time as 20060102T150405Z>", e.g.
// "sched-nightly-20261129T020000Z". The same (schedule, time) always gives
// the same id, in the schedule's namespace, so a second submission of it
// (a retry, a failover, a backfill of a time that ran) returns the task
// that exists: that is what makes a time run once, for as long as the
// scheduler deduplicates ids (with an archive, its deduplication window).
// A schedule deleted and created again under the same name shares the ids.
// With a valid schedule name (at most 63 characters) the id is valid
// (at most 86 characters from [A-Za-z0-9._:-]).
func TaskID(schedule string, nominal time.Time) string {
	return "sched-" + schedule + "-" + nominal.UTC().Format(idTimeLayout)
}

// TriggerTaskID returns the id of the task of a manual trigger at time at:
// "trig-<schedule>-<UTC time as 20060102T150405.000Z>" (to the
// millisecond). A trigger is not a nominal time: it never makes a
// scheduled time a no-op, and two triggers in one millisecond are one.
func TriggerTaskID(schedule string, at time.Time) string {
	return "trig-" + schedule + "-" + at.UTC().Format("20060102T150405.000Z")
}

// ParseTaskID inverts TaskID.
func ParseTaskID(id string) (schedule string, nominal time.Time, err error) {
	rest, ok := strings.CutPrefix(id, "sched-")
	if !ok || len(rest) < len(idTimeLayout)+2 || rest[len(rest)-len(idTimeLayout)-1] != '-' {
		return "", time.Time{}, fmt.Errorf("schedule: %q is not a scheduled task id", id)
	}
	name, ts := rest[:len(rest)-len(idTimeLayout)-1], rest[len(rest)-len(idTimeLayout):]
	t, err := time.Parse(idTimeLayout, ts)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("schedule: %q is not a scheduled task id: %w", id, err)
	}
	return name, t, nil
}
