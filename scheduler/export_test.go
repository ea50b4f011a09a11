package scheduler

import (
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
