package schedule_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/schedule"
	"github.com/reeve-org/reeve/internal/workflow"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func compile(t *testing.T, s schedule.Spec) *schedule.Calendar {
	t.Helper()
	c, err := schedule.Compile("spec", s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// formatIn renders times in a zone, so a table reads as a wall clock.
func formatIn(ts []time.Time, loc *time.Location) string {
	var b []string
	for _, t := range ts {
		b = append(b, t.In(loc).Format("01-02 15:04 MST"))
	}
	return strings.Join(b, ", ")
}

func TestNextAcrossDST(t *testing.T) {
	for _, tc := range []struct {
		name, cron, zone string
		from             string // RFC 3339
		n                int
		want             string
	}{
		// New York: clocks go 02:00 EST -> 03:00 EDT on 2026-03-08 and
		// 02:00 EDT -> 01:00 EST on 2026-11-01.
		{"NY daily in the skipped hour runs at the end of the gap", "30 2 * * *", "America/New_York", "2026-03-06T12:00:00Z", 4,
			"03-07 02:30 EST, 03-08 03:00 EDT, 03-09 02:30 EDT, 03-10 02:30 EDT"},
		{"NY half-hourly through the gap: the skipped times are one run at 03:00", "*/30 * * * *", "America/New_York", "2026-03-08T06:15:00Z", 4,
			"03-08 01:30 EST, 03-08 03:00 EDT, 03-08 03:30 EDT, 03-08 04:00 EDT"},
		{"NY daily in the repeated hour runs once, at the first occurrence", "30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", 3,
			"11-01 01:30 EDT, 11-02 01:30 EST, 11-03 01:30 EST"},
		{"NY half-hourly through the repeated hour: each wall time once", "*/30 * * * *", "America/New_York", "2026-11-01T04:45:00Z", 5,
			"11-01 01:00 EDT, 11-01 01:30 EDT, 11-01 02:00 EST, 11-01 02:30 EST, 11-01 03:00 EST"},
		// Berlin: 02:00 CET -> 03:00 CEST on 2026-03-29, 03:00 CEST ->
		// 02:00 CET on 2026-10-25 (time.Date normalizes both the other way
		// round from New York).
		{"Berlin daily in the skipped hour", "30 2 * * *", "Europe/Berlin", "2026-03-27T12:00:00Z", 4,
			"03-28 02:30 CET, 03-29 03:00 CEST, 03-30 02:30 CEST, 03-31 02:30 CEST"},
		{"Berlin 02:30 and 03:00 on the spring day are one run", "0,30 2,3 29 3 *", "Europe/Berlin", "2026-03-28T12:00:00Z", 2,
			"03-29 03:00 CEST, 03-29 03:30 CEST"},
		{"Berlin daily in the repeated hour runs at the first occurrence", "30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 3,
			"10-25 02:30 CEST, 10-26 02:30 CET, 10-27 02:30 CET"},
		{"Berlin hourly through the repeated hour", "0 * * * *", "Europe/Berlin", "2026-10-24T23:30:00Z", 4,
			"10-25 02:00 CEST, 10-25 03:00 CET, 10-25 04:00 CET, 10-25 05:00 CET"},
		{"descriptor @daily in a zone", "@daily", "Europe/Berlin", "2026-03-28T12:00:00Z", 2,
			"03-29 00:00 CET, 03-30 00:00 CEST"},
		{"descriptor @hourly in UTC", "@hourly", "", "2026-03-29T00:10:00Z", 2,
			"03-29 01:00 UTC, 03-29 02:00 UTC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := compile(t, schedule.Spec{Cron: tc.cron, Zone: tc.zone})
			from, _ := time.Parse(time.RFC3339, tc.from)
			if got := formatIn(c.NextN(from, tc.n), c.Location()); got != tc.want {
				t.Errorf("next %d after %s:\n got %s\nwant %s", tc.n, tc.from, got, tc.want)
			}
		})
	}
}

func TestEveryIsAbsoluteTime(t *testing.T) {
	for _, tc := range []struct {
		name          string
		every, offset time.Duration
		zone, from    string
		n             int
		want          string
	}{
		{"every 10m", 10 * time.Minute, 0, "", "2026-03-08T06:55:00Z", 3, "03-08 07:00 UTC, 03-08 07:10 UTC, 03-08 07:20 UTC"},
		{"every 1h with offset 15m", time.Hour, 15 * time.Minute, "", "2026-03-08T06:15:00Z", 2, "03-08 07:15 UTC, 03-08 08:15 UTC"},
		{"every 1s", time.Second, 0, "", "2026-03-08T06:15:00.5Z", 2, "03-08 06:15 UTC, 03-08 06:15 UTC"},
		{"every 24h through New York's spring change stays 24h apart", 24 * time.Hour, 0, "America/New_York", "2026-03-07T12:00:00Z", 2,
			"03-07 19:00 EST, 03-08 20:00 EDT"},
		{"every 1h through Berlin's autumn change fires in both passes of the hour", time.Hour, 30 * time.Minute, "Europe/Berlin", "2026-10-24T23:00:00Z", 3,
			"10-25 01:30 CEST, 10-25 02:30 CEST, 10-25 02:30 CET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := compile(t, schedule.Spec{Every: tc.every, Offset: tc.offset, Zone: tc.zone})
			from, _ := time.Parse(time.RFC3339Nano, tc.from)
			if got := formatIn(c.NextN(from, tc.n), c.Location()); got != tc.want {
				t.Errorf("got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestEverySecondsAreExact(t *testing.T) {
	c := compile(t, schedule.Spec{Every: time.Second})
	from := time.Date(2026, 3, 8, 6, 15, 0, 500_000_000, time.UTC)
	got := c.NextN(from, 2)
	want := []time.Time{from.Truncate(time.Second).Add(time.Second), from.Truncate(time.Second).Add(2 * time.Second)}
	if len(got) != 2 || !got[0].Equal(want[0]) || !got[1].Equal(want[1]) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestStartAndEndBoundTheTimes(t *testing.T) {
	start := time.Date(2026, 1, 1, 10, 0, 30, 0, time.UTC)
	end := time.Date(2026, 1, 1, 10, 3, 0, 0, time.UTC)
	c := compile(t, schedule.Spec{Cron: "* * * * *", Start: start, End: end})
	got := formatIn(c.NextN(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), 10), time.UTC)
	if want := "01-01 10:01 UTC, 01-01 10:02 UTC, 01-01 10:03 UTC"; got != want {
		t.Fatalf("got %s, want %s (start excludes 10:00, end includes 10:03)", got, want)
	}
	c = compile(t, schedule.Spec{Every: time.Minute, Start: time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)})
	if got, _ := c.Next(time.Time{}); !got.Equal(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("a start on a nominal time is included: got %v", got)
	}
}

func TestCompileNamesTheBadField(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec  schedule.Spec
		field string
	}{
		{"nothing", schedule.Spec{}, "spec.cron"},
		{"both", schedule.Spec{Cron: "* * * * *", Every: time.Minute}, "spec.cron"},
		{"bad cron", schedule.Spec{Cron: "61 * * * *"}, "spec.cron"},
		{"six fields", schedule.Spec{Cron: "0 * * * * *"}, "spec.cron"},
		{"@every", schedule.Spec{Cron: "@every 1m"}, "spec.cron"},
		{"TZ prefix", schedule.Spec{Cron: "TZ=UTC * * * * *"}, "spec.cron"},
		{"offset with cron", schedule.Spec{Cron: "* * * * *", Offset: time.Second}, "spec.offset"},
		{"interval under 1s", schedule.Spec{Every: 500 * time.Millisecond}, "spec.every"},
		{"interval of fractions", schedule.Spec{Every: 1500 * time.Millisecond}, "spec.every"},
		{"offset as long as the interval", schedule.Spec{Every: time.Minute, Offset: time.Minute}, "spec.offset"},
		{"negative offset", schedule.Spec{Every: time.Minute, Offset: -time.Second}, "spec.offset"},
		{"zone", schedule.Spec{Every: time.Minute, Zone: "Mars/Olympus"}, "spec.time_zone"},
		{"Local is not a zone", schedule.Spec{Every: time.Minute, Zone: "Local"}, "spec.time_zone"},
		{"end before start", schedule.Spec{Every: time.Minute, Start: time.Unix(100, 0), End: time.Unix(50, 0)}, "spec.end_time"},
		{"jitter", schedule.Spec{Every: time.Minute, Jitter: -time.Second}, "spec.jitter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := schedule.Compile("spec", tc.spec)
			var fe *workflow.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("got %v, want a field error on %s", err, tc.field)
			}
		})
	}
}

func TestJitterIsTheSameOnEveryFirer(t *testing.T) {
	spec := schedule.Spec{Every: time.Minute, Jitter: 30 * time.Second}
	a, b := compile(t, spec), compile(t, spec)
	at := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	seen := map[time.Duration]bool{}
	for i := range 50 {
		tm := at.Add(time.Duration(i) * time.Minute)
		j := a.Jitter("default", "sync", tm)
		if j != b.Jitter("default", "sync", tm) || j < 0 || j >= spec.Jitter {
			t.Fatalf("jitter of %v: %v on one, %v on the other (want equal, in [0, %v))", tm, j, b.Jitter("default", "sync", tm), spec.Jitter)
		}
		seen[j] = true
	}
	if len(seen) < 10 {
		t.Fatalf("50 times got %d distinct jitters: not spread", len(seen))
	}
}
