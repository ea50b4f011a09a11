package verify

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// Schedule violation kinds (issue 38; docs/schedules.md).
const (
	// KindScheduleRunTwice: a schedule's recent runs hold one nominal time
	// twice (triggers aside, which are not nominal times).
	KindScheduleRunTwice = "schedule_time_run_twice"
	// KindScheduleRunLost: the task of a recent run of a schedule, started
	// within the retention, is neither in etcd nor in the archive.
	KindScheduleRunLost = "schedule_run_lost"
	// KindScheduleBehind: a schedule that is not paused was due more than
	// Slack ago and not fired: no supervisor leader fires, or it cannot.
	KindScheduleBehind = "schedule_behind"
)

// checkSchedules checks every schedule record: each nominal time of its
// recent runs once, their tasks not lost, and its next firing not overdue.
func (ck *checker) checkSchedules(ctx context.Context) error {
	runs := map[string][]string{} // namespace -> task ids of recent runs to look for
	err := ck.pages(ctx, ck.opts.Prefix+"schedules/", false, func(kvs []*mvccKV) error {
		for _, kv := range kvs {
			sc := &reevev1.Schedule{}
			if err := proto.Unmarshal(kv.value, sc); err != nil {
				ck.add(Violation{Kind: KindUndecodable, Key: kv.key, Detail: err.Error()})
				continue
			}
			ck.checkSchedule(kv.key, sc, runs)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, ns := range slices.Sorted(maps.Keys(runs)) {
		lost, err := ck.opts.Tasks.Lost(ctx, ns, runs[ns])
		if err != nil {
			return fmt.Errorf("verify: read the tasks of schedules' runs: %w", err)
		}
		for _, id := range lost {
			ck.add(Violation{Kind: KindScheduleRunLost, Namespace: ns, TaskID: id, Detail: "a schedule's recent run started this task, and it is neither in etcd nor in the archive"})
		}
	}
	return nil
}

func (ck *checker) checkSchedule(key string, sc *reevev1.Schedule, runs map[string][]string) {
	now := ck.opts.Now()
	seen := map[int64]string{}
	for _, r := range sc.GetInfo().GetRecentRuns() {
		if r.GetOrigin() != "trigger" { // a trigger is no nominal time
			at := r.GetNominalTime().AsTime().UnixNano()
			if other, ok := seen[at]; ok && other != r.GetTaskId() {
				ck.add(Violation{Kind: KindScheduleRunTwice, Key: key, Namespace: sc.GetNamespace(), TaskID: r.GetTaskId(),
					Detail: fmt.Sprintf("schedule %q ran its time %s twice: tasks %s and %s", sc.GetName(), r.GetNominalTime().AsTime().UTC().Format(time.RFC3339), other, r.GetTaskId())})
			}
			seen[at] = r.GetTaskId()
		}
		if ck.opts.Retention <= 0 || now.Sub(r.GetStartTime().AsTime()) < ck.opts.Retention {
			runs[sc.GetNamespace()] = append(runs[sc.GetNamespace()], r.GetTaskId())
		}
	}
	if next := sc.GetInfo().GetNextFireTime(); next != nil && !sc.GetPaused() {
		if late := now.Sub(next.AsTime()); late > ck.opts.Slack {
			ck.add(Violation{Kind: KindScheduleBehind, Key: key, Namespace: sc.GetNamespace(),
				Detail: fmt.Sprintf("schedule %q was due at %s and is %s late: is a supervisor leader running (its schedules' firing: reeve.schedules.lateness)?",
					sc.GetName(), next.AsTime().UTC().Format(time.RFC3339), late.Round(time.Second))})
		}
	}
}
