package bench

import (
	"context"
	"testing"
	"time"
)

// The recovery scenarios measure recovery after each step's deadline, even
// when the scheduler's ack timeout is shorter than the step timeout: the
// holding agent acknowledges its assignments (a hung handler behind a live
// connection), so nothing is taken back and re-dispatched before its
// deadline. (Without the acknowledgements the ack timeout took the attempts
// back first, and at 10,000 tasks the silent scenario reported negative
// latencies.)
func TestRecoveryRedispatchesOnlyAfterTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := RunRecovery(ctx, Config{Tasks: 20, AckTimeout: time.Second, NoFsync: true, MaxDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Scenarios) != 2 {
		t.Fatalf("%d scenarios, want 2", len(rep.Scenarios))
	}
	for _, sc := range rep.Scenarios {
		if sc.Error != "" || sc.Lost != 0 || sc.Stuck != 0 || sc.Redispatched != 20 {
			t.Errorf("%s: error %q, lost %d, stuck %d, redispatched %d; want none, 0, 0, 20", sc.Scenario, sc.Error, sc.Lost, sc.Stuck, sc.Redispatched)
		}
		if sc.RedispatchedEarly != 0 || sc.RedispatchP50Ms < 0 {
			t.Errorf("%s: %d of 20 re-dispatched before their deadline (p50 %.0f ms): the scenario did not measure recovery", sc.Scenario, sc.RedispatchedEarly, sc.RedispatchP50Ms)
		}
	}
}
