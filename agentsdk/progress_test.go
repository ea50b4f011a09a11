package agentsdk_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// A failed attempt's last heartbeat details reach the next attempt, also
// when the heartbeat carrying them was coalesced away, and its error's
// RetryAfter holds the next attempt back although the policy would retry
// at once.
func TestHeartbeatDetailsAndRetryAfterReachTheNextAttempt(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	a := newAgent(t, []string{s.Addr})
	const retryAfter = time.Second
	type progress struct{ Page int }
	var failedAt time.Time
	var resumedAfter atomic.Int64 // set by attempt 2, read after the task ended
	a.Handle("pages", func(ctx context.Context, st *agentsdk.Step) (any, error) {
		var p progress
		found, err := st.PreviousHeartbeatDetails(&p)
		if err != nil {
			return nil, err
		}
		if st.Attempt == 1 {
			if found {
				return nil, agentsdk.Permanent(&agentsdk.Error{Code: "unexpected", Message: "details on a first attempt"})
			}
			for page := 1; page <= 3; page++ { // within one second: coalesced
				if err := st.HeartbeatDetails(ctx, progress{Page: page}); err != nil {
					return nil, err
				}
			}
			failedAt = time.Now()
			return nil, &agentsdk.Error{Code: "flaky", Message: "connection reset", Details: map[string]any{"after_page": 3}, RetryAfter: retryAfter}
		}
		resumedAfter.Store(int64(time.Since(failedAt)))
		return p, nil
	})
	runAgent(t, a)
	c := s.Client(t)
	x := spec("x", "pages", 10*time.Second)
	x.HeartbeatTimeout = durationpb.New(5 * time.Second)
	x.RetryPolicy = &reevev1.RetryPolicy{MaxAttempts: 3, InitialBackoff: durationpb.New(0)}
	submit(t, c, "resume", x)

	final := testenv.WaitTask(t, c, "default", "resume", wait)
	st := final.GetSteps()[0]
	if final.GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED || st.GetAttempt() != 2 {
		t.Fatalf("task %v at attempt %d (%v), want SUCCEEDED at attempt 2", final.GetState(), st.GetAttempt(), st.GetLastError())
	}
	if page := st.GetOutput().GetStructValue().GetFields()["Page"].GetNumberValue(); page != 3 {
		t.Errorf("attempt 2 resumed from page %v, want the last details sent (3)", page)
	}
	if d := time.Duration(resumedAfter.Load()); d < retryAfter {
		t.Errorf("attempt 2 started %v after the failure, before its RetryAfter %v", d, retryAfter)
	}
}
