// Package taskread reads tasks across both places they live: etcd, which
// holds live work (internal/store), and the archive, which holds finished
// tasks after they moved (internal/archive; docs/archive.md). It is the one
// place that reads both: the scheduler's GetTask, ListTasks, CountTasks and
// SubmitTask's idempotency, `reeve verify`, the benchmark and the chaos
// checks go through a Reader.
//
// Every read looks in etcd first and in the archive second. A task is
// written to the archive before it is deleted from etcd, so a task that etcd
// did not hold when it was read is in the archive when the archive is read
// after, unless it never existed or the archive's retention dropped it.
//
//	r := taskread.New(st, a) // a nil: no archive, etcd alone
//	rec, archived, err := r.Get(ctx, "default", "order-42")
//	lost, err := r.Lost(ctx, "default", acknowledgedIDs)
//
// An archive that cannot answer makes a read fail with an *ArchiveError
// (the scheduler answers UNAVAILABLE, ARCHIVE_UNAVAILABLE); etcd's errors
// are the store's.
package taskread
