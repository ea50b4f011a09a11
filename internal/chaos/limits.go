package chaos

import (
	"context"
	"fmt"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/chaos/workload"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

// chaosLimits are the max_running limits the run sets on its step types
// (issue 36), below what its agents could run at once (16 steps each), so
// that they bind while schedulers die and steps are re-dispatched:
// `reeve verify`'s limit_exceeded (verifyStore) must find none. A hook
// step its agent deferred frees its slot of chaos.hook.
var chaosLimits = map[string]int32{"chaos.work": 12, "chaos.undo": 4, workload.HookType: 3}

// setLimits sets chaosLimits through QueueService, as an admin would
// (the operator's TLS files in a secure cluster), retried for a while (the
// schedulers may still be starting).
func setLimits(ctx context.Context, addrs []string, operator tlsconfig.Files, logf func(string, ...any)) error {
	cc, err := dialSchedulers(addrs, operator)
	if err != nil {
		return err
	}
	defer cc.Close()
	q := reevev1.NewQueueServiceClient(cc)
	for typ, n := range chaosLimits {
		deadline := time.Now().Add(30 * time.Second)
		for {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := q.SetQueueLimit(rctx, &reevev1.SetQueueLimitRequest{Type: typ, MaxRunning: n})
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("chaos: set the limit of %s: %w", typ, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		logf("chaos: max_running %d on %s", n, typ)
	}
	return nil
}
