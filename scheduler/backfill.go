package scheduler

import (
	"context"
	"time"
)

// backfillIndexes writes the created indexes of tasks stored by an older
// Reeve (once per store; see store.BackfillCreatedIndexes) and removes the
// indexes older Reeves wrote that nothing reads any more
// (store.DropLegacyIndexes), retrying while etcd is unavailable.
func (s *Server) backfillIndexes(ctx context.Context) {
	for attempt := 0; ; attempt++ {
		n, err := s.store.BackfillCreatedIndexes(ctx)
		var dropped int64
		if err == nil {
			dropped, err = s.store.DropLegacyIndexes(ctx)
		}
		if err == nil {
			if n > 0 {
				s.log.Info("created indexes backfilled", "tasks", n)
			}
			if dropped > 0 {
				s.log.Info("legacy index keys removed", "keys", dropped)
			}
			return
		}
		s.log.Warn("backfill created indexes", "err", err, "attempt", attempt)
		t := s.opts.clock.NewTimer(min(time.Duration(attempt+1)*time.Second, 30*time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
		}
	}
}
