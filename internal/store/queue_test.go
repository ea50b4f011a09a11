package store_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// A queued step with a schedule-to-start timeout has a deadline key at its
// schedule-to-start deadline, replaced by the complete-by one when claimed;
// without a timeout a queued step has none.
func TestQueuedStepDeadlineKey(t *testing.T) {
	s, c := newStore(t)
	wf := &reevev1.Workflow{Steps: []*reevev1.StepSpec{
		{Name: "a", Type: "t", Timeout: durationpb.New(time.Minute), ScheduleToStartTimeout: durationpb.New(10 * time.Second)},
		{Name: "b", Type: "t"},
	}}
	rec := &storev1.TaskRecord{Task: taskstate.New("default", "q", wf, nil, t0), RequestDigest: []byte("q")}
	if _, _, err := s.CreateTask(ctx(t), rec); err != nil {
		t.Fatal(err)
	}
	got, err := s.ExpiredDeadlines(ctx(t), t0.Add(time.Hour), 10)
	if err != nil || len(got) != 1 || got[0].Step != "a" || got[0].Attempt != 1 || !got[0].CompleteBy.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("deadlines %v %v, want only a@1 at t0+10s (b has no schedule-to-start timeout)", got, err)
	}
	if _, _, err := s.UpdateTask(ctx(t), "default", "q", func(task *reevev1.Task) error {
		return taskstate.Claim(task, "a", 1, "s1", "agent", t0.Add(time.Second))
	}); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, c, "deadlines/"); len(got) != 1 || got[0] != fmt.Sprintf("/reeve/deadlines/%020d/default/q/a/1", t0.Add(61*time.Second).UnixNano()) {
		t.Fatalf("deadline keys after the claim %v, want only the complete-by one", got)
	}
}
