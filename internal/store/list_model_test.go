package store_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
)

// modelTask is what a listing is judged by.
type modelTask struct {
	id      string
	wf      string
	state   reevev1.TaskState
	created time.Time
}

// Random queries, paged to the end, list exactly what a model of the store
// says, in its order (newest first, ties by id): every combination of state
// (one or any: the merge of every state's index), workflow, create-time
// bounds, id prefix, page size, byte budget and scan budget, over tasks
// whose create times tie, crowd one window and lie far apart.
func TestQueryTasksMatchesAModel(t *testing.T) {
	s, _ := newStore(t)
	rng := rand.New(rand.NewPCG(15, 6))
	states := []reevev1.TaskState{
		reevev1.TaskState_TASK_STATE_PENDING, reevev1.TaskState_TASK_STATE_RUNNING, reevev1.TaskState_TASK_STATE_SUCCEEDED,
		reevev1.TaskState_TASK_STATE_FAILED, reevev1.TaskState_TASK_STATE_COMPENSATING, reevev1.TaskState_TASK_STATE_COMPENSATED,
		reevev1.TaskState_TASK_STATE_CANCELED,
	}
	now := time.Now()
	var tasks []modelTask
	for i := range 240 {
		var created time.Time
		switch i % 4 {
		case 0: // ties: a few distinct instants
			created = now.Add(-time.Duration(rng.IntN(3)) * time.Millisecond)
		case 1: // one window of a second
			created = now.Add(-time.Duration(rng.Int64N(int64(time.Second))))
		case 2: // hours to years back
			created = now.Add(-time.Duration(rng.Int64N(int64(3 * 365 * 24 * time.Hour))))
		default: // the future
			created = now.Add(time.Duration(rng.Int64N(int64(72 * time.Hour))))
		}
		m := modelTask{id: fmt.Sprintf("t%d-%03d", i%3, i), wf: []string{"a", "b"}[rng.IntN(2)], state: states[rng.IntN(len(states))], created: created}
		rec := recordAt(i, m.wf, m.state)
		rec.Task.Id = m.id
		rec.Task.CreateTime = timestamppb.New(m.created)
		if _, _, err := s.CreateTask(ctx(t), rec); err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, m)
	}
	checkQueriesAgainstModel(t, s, rng, states, tasks, false)
}

// checkQueriesAgainstModel pages 150 random queries (with q.Unindexed set
// to unindexed) to their end and compares what they list with the model.
func checkQueriesAgainstModel(t *testing.T, s *store.Store, rng *rand.Rand, states []reevev1.TaskState, tasks []modelTask, unindexed bool) {
	t.Helper()
	slices.SortFunc(tasks, func(a, b modelTask) int {
		return cmp.Or(b.created.Compare(a.created), strings.Compare(a.id, b.id))
	})
	// A bound is a task's create time, or a little off one.
	bound := func() time.Time {
		if rng.IntN(3) == 0 {
			return time.Time{}
		}
		return tasks[rng.IntN(len(tasks))].created.Add(time.Duration(rng.IntN(3)-1) * time.Microsecond)
	}
	for qi := range 150 {
		q := store.TaskQuery{Namespace: "default", Limit: 1 + rng.IntN(40), CreatedAfter: bound(), CreatedBefore: bound(), Unindexed: unindexed}
		if rng.IntN(2) == 0 {
			q.State = states[rng.IntN(len(states))]
		}
		if rng.IntN(3) == 0 {
			q.Workflow = []string{"a", "b"}[rng.IntN(2)]
		}
		if rng.IntN(3) == 0 {
			q.IDPrefix = fmt.Sprintf("t%d", rng.IntN(3))
			q.MaxScan = 1 + rng.IntN(60)
		}
		if rng.IntN(4) == 0 {
			q.MaxBytes = 1 + rng.IntN(3000) // a few tasks a page, or one
		}
		var want []string
		for _, m := range tasks {
			if (q.State == 0 || m.state == q.State) && (q.Workflow == "" || m.wf == q.Workflow) &&
				(q.CreatedAfter.IsZero() || !m.created.Before(q.CreatedAfter)) &&
				(q.CreatedBefore.IsZero() || m.created.Before(q.CreatedBefore)) && strings.HasPrefix(m.id, q.IDPrefix) {
				want = append(want, m.id)
			}
		}
		var got []string
		pages := 0
		for ; pages < 2*len(tasks)+10; pages++ {
			page, err := s.QueryTasks(ctx(t), q)
			if err != nil {
				t.Fatalf("query %d %+v: %v", qi, q, err)
			}
			if len(page.Tasks) > q.Limit {
				t.Fatalf("query %d %+v: a page of %d tasks, over the limit", qi, q, len(page.Tasks))
			}
			for _, task := range page.Tasks {
				got = append(got, task.GetId())
			}
			if page.Next == nil {
				break
			}
			q.After = page.Next
		}
		if !slices.Equal(got, want) {
			q.After = nil
			t.Fatalf("query %d %+v over %d pages:\n got  %v\n want %v", qi, q, pages+1, got, want)
		}
	}
}
