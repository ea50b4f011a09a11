package scheduler

import "context"

// CheckLayout checks etcd's key layout version (store.AwaitLayout: it
// waits while etcd cannot be reached, and writes the version into an etcd
// that has none) and returns an error matching store.ErrLayoutTooNew when
// the layout is newer than this Reeve knows, naming both versions: the
// scheduler must not start. Run calls it first; a process that serves the
// scheduler's API calls it before it serves, so that nothing is written to
// such an etcd. Once it succeeded it costs nothing.
func (s *Server) CheckLayout(ctx context.Context) error { return s.store.AwaitLayout(ctx) }

// stopUnstarted ends a Run that did not start (the layout check failed, or
// ctx ended during it): work that stream handlers started meanwhile is
// waited for, as Run's shutdown does. It returns nil when ctx ended.
func (s *Server) stopUnstarted(ctx context.Context, err error) error {
	s.stopTimers()
	s.work.closeAndWait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}
