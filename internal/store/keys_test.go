package store

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// Keys are built without fmt on the write path; they must be byte for byte
// what the fmt-built layout wrote, or a newer scheduler would never delete
// the keys an older one wrote (its index diff names other keys).
func TestKeysMatchTheFormattedLayout(t *testing.T) {
	k := keys{prefix: "/reeve/"}
	for _, at := range []time.Time{
		time.Unix(0, 0), time.Unix(0, 1), time.Unix(1, 5), time.Date(2026, 11, 25, 15, 4, 5, 123456789, time.UTC),
		time.Date(2262, 4, 11, 0, 0, 0, 0, time.UTC), time.Unix(0, math.MaxInt64),
	} {
		for _, attempt := range []int32{0, 1, 12, math.MaxInt32} {
			if got, want := k.deadline(at, "ns", "id", "step", attempt),
				fmt.Sprintf("/reeve/deadlines/%020d/%s/%s/%s/%d", at.UnixNano(), "ns", "id", "step", attempt); got != want {
				t.Errorf("deadline %v %d: %q, want %q", at, attempt, got, want)
			}
			if got, want := k.beating("ns", "agent", "id", "step", attempt),
				fmt.Sprintf("/reeve/beating/ns/agent/id/step/%d", attempt); got != want {
				t.Errorf("beating %d: %q, want %q", attempt, got, want)
			}
		}
		if got, want := k.ended(at, "ns", "id"), fmt.Sprintf("/reeve/ended/%020d/ns/id", at.UnixNano()); got != want {
			t.Errorf("ended %v: %q, want %q", at, got, want)
		}
		if got, want := age(at), fmt.Sprintf("%020d", int64(math.MaxInt64)-at.UnixNano()); got != want {
			t.Errorf("age %v: %q, want %q", at, got, want)
		}
		if back, err := parseAge(age(at)); err != nil || !back.Equal(at) {
			t.Errorf("parseAge(age(%v)) = %v, %v", at, back, err)
		}
	}
}
