package scheduler

import (
	"context"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/reeve-org/reeve/internal/store"
)

// backfillIndexes writes the created indexes of tasks stored by an older
// Reeve (once per store; see store.BackfillCreatedIndexes) and removes the
// indexes older Reeves wrote that nothing reads any more
// (store.DropLegacyIndexes), retrying while etcd is unavailable.
func backfillIndexes(ctx context.Context, st *store.Store, log *slog.Logger, clock clockwork.Clock) {
	for attempt := 0; ; attempt++ {
		n, err := st.BackfillCreatedIndexes(ctx)
		var dropped int64
		if err == nil {
			dropped, err = st.DropLegacyIndexes(ctx)
		}
		if err == nil {
			if n > 0 {
				log.Info("created indexes backfilled", "tasks", n)
			}
			if dropped > 0 {
				log.Info("legacy index keys removed", "keys", dropped)
			}
			return
		}
		log.Warn("backfill created indexes", "err", err, "attempt", attempt)
		t := clock.NewTimer(min(time.Duration(attempt+1)*time.Second, 30*time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
		}
	}
}
