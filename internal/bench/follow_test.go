package bench

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// A completion the ended-key watch cannot deliver (it was compacted away)
// is still reported, by looking the task up after the watch breaks.
func TestFollowEndedSurvivesCompaction(t *testing.T) {
	cli := etcdtest.New(t).Client()
	st := store.New(cli)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start, err := st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wf := &reevev1.Workflow{Steps: []*reevev1.StepSpec{{Name: "a", Type: "t", Timeout: durationpb.New(time.Minute)}}}
	now := time.Now()
	if _, _, err := st.CreateTask(ctx, &storev1.TaskRecord{Task: taskstate.New("default", "t1", wf, nil, now)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.UpdateTask(ctx, "default", "t1", func(task *reevev1.Task) error {
		return taskstate.Cancel(task, "", "test", false, now)
	}); err != nil {
		t.Fatal(err)
	}
	cur, err := st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, cur); err != nil {
		t.Fatal(err)
	}
	done := newCompletions()
	ch := done.expect("t1")
	fctx, stop := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() { followed <- followEnded(fctx, st, taskread.New(st, nil), start, done) }()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("the completion before the compaction was never reported")
	}
	stop()
	<-followed
	if done.failedCount() != 1 { // canceled, reported once
		t.Fatalf("failed count %d, want 1", done.failedCount())
	}
}
