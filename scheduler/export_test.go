package scheduler

import (
	"context"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/archive"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
)

// ArchiveTaskForTest is task as the scheduler archives it.
func ArchiveTaskForTest(task *reevev1.Task) (archive.Task, error) {
	return archiveTask(&storev1.TaskRecord{Task: task})
}

// WithRunQueueWaitForTest replaces the runtime's run-queue measure of the
// CPU controller (WithOverloadCPU) with wait.
func WithRunQueueWaitForTest(wait func() time.Duration) Option {
	return func(o *options) { o.runQueueWait = wait }
}

// FireScheduleAsOfForTest fires schedule ns/name under fence as a firer
// that read its record at revision rev (GetSchedule): when the record was
// written since, the firing's first run loses its compare and runs again
// on the record read then, as when two firers fire it at once.
func (s *Server) FireScheduleAsOfForTest(ctx context.Context, ns, name string, rev int64, cur *reevev1.Schedule, fence *reevev1.Fence) (*reevev1.FireOutcome, error) {
	_, fences, err := s.supervisor.fence(fence)
	if err != nil {
		return nil, err
	}
	return s.schedules.fireSchedule(ctx, ns, name, cur, rev, fences[0])
}

// ScheduleRecordForTest reads schedule ns/name's record and its revision.
func (s *Server) ScheduleRecordForTest(ctx context.Context, ns, name string) (*reevev1.Schedule, int64, error) {
	return s.store.GetSchedule(ctx, ns, name)
}
