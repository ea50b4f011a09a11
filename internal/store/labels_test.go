package store_test

import (
	"fmt"
	"slices"
	"testing"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// Labels (issue 37): a task's labels are index keys of its record, kept
// until it leaves etcd; a list by labels returns exactly the tasks with
// all of them (and the state asked for), newest first, over pages of any
// size, whatever the share of other tasks between them.
func TestListByLabels(t *testing.T) {
	s, c := newStore(t)
	labeled := func(i int, labels map[string]string) *storev1.TaskRecord {
		rec := recordAt(i, "wf", reevev1.TaskState_TASK_STATE_PENDING)
		rec.Task.Labels = labels
		return rec
	}
	var want []string // newest first: team=a and env=prod, PENDING
	for i := range 60 {
		labels := map[string]string{"team": []string{"a", "b"}[i%2]}
		if i%3 == 0 {
			labels["env"] = "prod"
		}
		if _, _, err := s.CreateTask(ctx(t), labeled(i, labels)); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 && i%3 == 0 && i%4 != 0 {
			want = append(want, fmt.Sprintf("task-%06d", i))
		}
	}
	// Tasks i%4 == 0 of those end: the state filter drops them.
	for i := 0; i < 60; i += 4 {
		if _, _, err := s.UpdateTask(ctx(t), "default", fmt.Sprintf("task-%06d", i), func(task *reevev1.Task) error {
			return taskstate.Cancel(task, "", "test", false, t0)
		}); err != nil {
			t.Fatal(err)
		}
	}
	slices.Reverse(want)
	for _, size := range []int{1, 3, 100} {
		got := pagedIDs(t, s, store.TaskQuery{Namespace: "default", State: reevev1.TaskState_TASK_STATE_PENDING, Limit: size,
			Labels: map[string]string{"team": "a", "env": "prod"}})
		if !slices.Equal(got, want) {
			t.Fatalf("pages of %d: %v, want %v", size, got, want)
		}
	}
	counts, _, err := s.CountByLabels(ctx(t), "default", "", map[string]string{"team": "a", "env": "prod"})
	if err != nil || counts[reevev1.TaskState_TASK_STATE_PENDING] != int64(len(want)) || counts[reevev1.TaskState_TASK_STATE_CANCELED] != 5 {
		t.Fatalf("counts %v (%v), want %d PENDING and 5 CANCELED", counts, err, len(want))
	}
	if n := len(keys(t, c, "labels/")); n != 60+20 {
		t.Fatalf("%d label keys, want one a label of each task (80)", n)
	}
}
