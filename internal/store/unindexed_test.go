package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskstate"
)

// newUnindexedStore is a store as a scheduler with an archive runs it
// (WithEndedUnindexed), and a store of the same etcd without it.
func newUnindexedStore(t *testing.T) (on, off *store.Store, c *clientv3.Client) {
	t.Helper()
	c = etcdtest.New(t).Client()
	return store.New(c, store.WithEndedUnindexed(true)), store.New(c), c
}

// endings are the ways a task of record()'s workflow (a, then b) ends.
var endings = map[string]func(*reevev1.Task, time.Time) error{
	"succeeded": func(t *reevev1.Task, now time.Time) error {
		for _, s := range t.GetSteps() {
			s.State = reevev1.StepState_STEP_STATE_SUCCEEDED
		}
		t.State, t.EndTime = reevev1.TaskState_TASK_STATE_SUCCEEDED, timestamppb.New(now)
		return nil
	},
	"compensated": func(t *reevev1.Task, now time.Time) error {
		t.GetSteps()[0].State = reevev1.StepState_STEP_STATE_COMPENSATED
		t.GetSteps()[0].Compensation = true
		t.GetSteps()[1].State = reevev1.StepState_STEP_STATE_SKIPPED
		t.State, t.EndTime = reevev1.TaskState_TASK_STATE_COMPENSATED, timestamppb.New(now)
		return nil
	},
	"canceled": func(t *reevev1.Task, now time.Time) error {
		return taskstate.Cancel(t, "", "test", false, now)
	},
	"canceled-after-a-success": func(t *reevev1.Task, now time.Time) error {
		// A succeeded step that declares a compensation: work left to undo.
		t.GetWorkflow().GetSteps()[0].Compensation = &reevev1.CompensationSpec{Type: "undo"}
		t.GetSteps()[0].State = reevev1.StepState_STEP_STATE_SUCCEEDED
		return taskstate.Cancel(t, "", "test", false, now)
	},
	"failed": func(t *reevev1.Task, now time.Time) error {
		return taskstate.FailTask(t, "", "test", now)
	},
}

// endTask creates task id of workflow wf created at `created`, and ends it
// the way ending names at `ended`.
func endTask(t *testing.T, s *store.Store, id, wf, ending string, created, ended time.Time) {
	t.Helper()
	rec := recordAt(0, wf, reevev1.TaskState_TASK_STATE_RUNNING)
	rec.Task.Id, rec.Task.CreateTime = id, timestamppb.New(created)
	if _, _, err := s.CreateTask(ctx(t), rec); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.UpdateTask(ctx(t), "default", id, func(task *reevev1.Task) error {
		return endings[ending](task, ended)
	}); err != nil {
		t.Fatal(err)
	}
}

// With an archive, a task that ends with nothing left to act on keeps only
// its record and its ended key (whose value says its state, create time and
// workflow); a FAILED task, and a CANCELED one with a success left to undo,
// keep their created keys as without an archive.
func TestEndedUnindexedKeepsOnlyRecordAndEndedKey(t *testing.T) {
	for _, tc := range []struct {
		ending    string
		unindexed bool
	}{
		{"succeeded", true},
		{"compensated", true},
		{"canceled", true},
		{"canceled-after-a-success", false},
		{"failed", false},
	} {
		t.Run(tc.ending, func(t *testing.T) {
			on, _, c := newUnindexedStore(t)
			endTask(t, on, "t1", "wf", tc.ending, t0, t0.Add(time.Second))
			v, err := on.GetTask(ctx(t), "default", "t1")
			if err != nil {
				t.Fatal(err)
			}
			st := v.Record.GetTask().GetState().String()
			age := fmt.Sprintf("%020d", math.MaxInt64-t0.UnixNano())
			ended := fmt.Sprintf("/reeve/ended/%020d/default/t1", t0.Add(time.Second).UnixNano())
			want := []string{ended, "/reeve/tasks/default/t1"}
			wantVal := st + "/" + age + "/wf"
			if !tc.unindexed {
				want = append(want, "/reeve/created-state/default/"+st+"/"+age+"/t1", "/reeve/created-wf-state/default/wf/"+st+"/"+age+"/t1")
				wantVal = st
			}
			slices.Sort(want)
			if got := layoutKeys(t, c, "alerts/"); !slices.Equal(got, want) {
				t.Fatalf("keys of a task that ended %s:\n got  %v\n want %v", tc.ending, got, want)
			}
			if v.Record.GetEndedUnindexed() != tc.unindexed {
				t.Errorf("ended_unindexed %v, want %v", v.Record.GetEndedUnindexed(), tc.unindexed)
			}
			resp, err := c.Get(ctx(t), ended)
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("ended key: %v, %v", resp, err)
			}
			if got := string(resp.Kvs[0].Value); got != wantVal {
				t.Errorf("ended value %q, want %q", got, wantVal)
			}
		})
	}
}

// layoutKeys returns every key of the store's layout that a task may have,
// sorted, but those under the prefixes skipped.
func layoutKeys(t *testing.T, c *clientv3.Client, skip ...string) []string {
	t.Helper()
	var out []string
	for _, p := range []string{"tasks/", "created-state/", "created-wf-state/", "ended/", "ready/", "deadlines/", "beating/", "alerts/"} {
		if !slices.Contains(skip, p) {
			out = append(out, keys(t, c, p)...)
		}
	}
	slices.Sort(out)
	return out
}

// A task is swept (by the retention or the archive's move) with exactly the
// keys it has, whichever way the store that ended it and the store that
// sweeps it run: none is left behind. So are the deletes of a Reeve that
// does not know ended_unindexed (1bf7b76, mid-upgrade): it deletes the keys
// the record implies without the field, created keys the task does not
// have among them, and nothing else is left.
func TestEndedUnindexedSweptWithoutLeaks(t *testing.T) {
	for _, tc := range []struct {
		name               string
		endWith, sweepWith string // "on", "off"
		ending             string
	}{
		{"ended unindexed, swept by a store without the option", "on", "off", "succeeded"},
		{"ended indexed, swept by a store with the option", "off", "on", "succeeded"},
		{"ended unindexed, swept with the option", "on", "on", "canceled"},
		{"failed with the option, swept without", "on", "off", "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on, off, c := newUnindexedStore(t)
			stores := map[string]*store.Store{"on": on, "off": off}
			endTask(t, stores[tc.endWith], "t1", "wf", tc.ending, t0, t0.Add(time.Second))
			n, _, _, err := stores[tc.sweepWith].SweepEndedFrom(ctx(t), "", t0.Add(time.Minute), 100)
			if err != nil || n != 1 {
				t.Fatalf("swept %d (%v), want 1", n, err)
			}
			if left := layoutKeys(t, c); len(left) != 0 {
				t.Fatalf("keys left after the sweep: %v", left)
			}
		})
	}
	t.Run("the deletes of a Reeve that does not know the field", func(t *testing.T) {
		on, _, c := newUnindexedStore(t)
		endTask(t, on, "t1", "wf", "succeeded", t0, t0.Add(time.Second))
		v, err := on.GetTask(ctx(t), "default", "t1")
		if err != nil {
			t.Fatal(err)
		}
		old := proto.Clone(v.Record).(*storev1.TaskRecord)
		old.EndedUnindexed = false // what 1bf7b76 sees: the field is unknown to it
		ops := []clientv3.Op{clientv3.OpDelete("/reeve/tasks/default/t1")}
		for key := range maps.Keys(on.DerivedKeys(old)) {
			ops = append(ops, clientv3.OpDelete(key))
		}
		// 1bf7b76 deletes the ended key it found, whose value it takes
		// for a state name, and the legacy states/ key it builds from it.
		resp, err := c.Get(ctx(t), "/reeve/ended/", clientv3.WithPrefix())
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("ended keys: %v, %v", resp, err)
		}
		ops = append(ops, clientv3.OpDelete(string(resp.Kvs[0].Key)),
			clientv3.OpDelete("/reeve/states/default/"+string(resp.Kvs[0].Value)+"/t1"))
		if _, err := c.Txn(ctx(t)).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
		if left := layoutKeys(t, c); len(left) != 0 {
			t.Fatalf("keys left after an older Reeve's sweep: %v", left)
		}
	})
}

// The ended key's value names its state for every reader of the state
// alone: the sweep's Skip (the archive's move leaves FAILED tasks) and
// WatchEnded.
func TestEndedUnindexedStateForWatchersAndSkip(t *testing.T) {
	on, _, _ := newUnindexedStore(t)
	rev, err := on.Revision(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	endTask(t, on, "ok", "wf", "succeeded", t0, t0.Add(time.Second))
	endTask(t, on, "bad", "wf", "failed", t0, t0.Add(time.Second))
	wctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	got := map[string]string{}
	err = on.WatchEnded(wctx, rev, func(_, id, state string) {
		got[id] = state
		if len(got) == 2 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	want := map[string]string{"ok": "TASK_STATE_SUCCEEDED", "bad": "TASK_STATE_FAILED"}
	if !maps.Equal(got, want) {
		t.Fatalf("WatchEnded reported %v, want %v", got, want)
	}
	var skipped []reevev1.TaskState
	n, _, _, err := on.SweepEnded(ctx(t), store.Sweep{Before: t0.Add(time.Minute), Limit: 100, Skip: func(st reevev1.TaskState) bool {
		skipped = append(skipped, st)
		return st == reevev1.TaskState_TASK_STATE_FAILED
	}})
	if err != nil || n != 1 {
		t.Fatalf("swept %d (%v), want 1 (the failed task skipped)", n, err)
	}
	slices.Sort(skipped)
	if want := []reevev1.TaskState{reevev1.TaskState_TASK_STATE_SUCCEEDED, reevev1.TaskState_TASK_STATE_FAILED}; !slices.Equal(skipped, want) {
		t.Fatalf("Skip was asked about %v, want %v", skipped, want)
	}
}

// With an archive, lists and counts are what they are without one: random
// queries, paged to the end, list exactly what the model says, over tasks
// that ended unindexed (SUCCEEDED, COMPENSATED, CANCELED with nothing to
// undo), tasks that ended with their created keys (FAILED, CANCELED after a
// success) and live ones, in two namespaces; some ended a little before
// their create time (schedulers' clocks apart), some long after it, just
// now; and the counts by state,
// of the created indexes and the ended index at one revision, are the
// model's.
func TestQueryTasksUnindexedMatchesAModel(t *testing.T) {
	on, _, c := newUnindexedStore(t)
	rng := rand.New(rand.NewPCG(34, 6))
	kinds := []struct {
		ending string // "" for a live task
		state  reevev1.TaskState
	}{
		{"", reevev1.TaskState_TASK_STATE_RUNNING},
		{"succeeded", reevev1.TaskState_TASK_STATE_SUCCEEDED},
		{"succeeded", reevev1.TaskState_TASK_STATE_SUCCEEDED},
		{"compensated", reevev1.TaskState_TASK_STATE_COMPENSATED},
		{"canceled", reevev1.TaskState_TASK_STATE_CANCELED},
		{"canceled-after-a-success", reevev1.TaskState_TASK_STATE_CANCELED},
		{"failed", reevev1.TaskState_TASK_STATE_FAILED},
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
		k := kinds[rng.IntN(len(kinds))]
		m := modelTask{id: fmt.Sprintf("t%d-%03d", i%3, i), wf: []string{"a", "b"}[rng.IntN(2)], state: k.state, created: created}
		ns := "default"
		if i%10 == 9 {
			ns = "other" // in the ended index too, never listed here
		}
		rec := recordAt(i, m.wf, reevev1.TaskState_TASK_STATE_RUNNING)
		rec.Task.Namespace, rec.Task.Id, rec.Task.CreateTime = ns, m.id, timestamppb.New(created)
		if _, _, err := on.CreateTask(ctx(t), rec); err != nil {
			t.Fatal(err)
		}
		if k.ending != "" {
			ended := created.Add(time.Duration(rng.Int64N(int64(5*time.Second))) - 500*time.Millisecond)
			if rng.IntN(3) == 0 && created.Before(now) {
				ended = now.Add(-time.Duration(rng.Int64N(int64(2 * time.Second)))) // long-running: ended just now
			}
			if _, _, err := on.UpdateTask(ctx(t), ns, m.id, func(task *reevev1.Task) error { return endings[k.ending](task, ended) }); err != nil {
				t.Fatal(err)
			}
		}
		if ns == "default" {
			tasks = append(tasks, m)
		}
	}
	if n := len(keys(t, c, "created-state/")); n > 200 {
		t.Fatalf("%d created-state keys for 240 tasks: too few ended unindexed (the setup failed)", n)
	}
	states := []reevev1.TaskState{
		reevev1.TaskState_TASK_STATE_RUNNING, reevev1.TaskState_TASK_STATE_SUCCEEDED, reevev1.TaskState_TASK_STATE_COMPENSATED,
		reevev1.TaskState_TASK_STATE_CANCELED, reevev1.TaskState_TASK_STATE_FAILED,
	}
	for _, wf := range []string{"", "a"} {
		counts, rev, err := on.CountTasksByState(ctx(t), "default", wf)
		if err != nil {
			t.Fatal(err)
		}
		unindexed, err := on.CountEndedUnindexed(ctx(t), "default", wf, rev)
		if err != nil {
			t.Fatal(err)
		}
		want := map[reevev1.TaskState]int64{}
		for _, m := range tasks {
			if wf == "" || m.wf == wf {
				want[m.state]++
			}
		}
		for _, st := range states {
			if got := counts[st] + unindexed[st]; got != want[st] {
				t.Errorf("workflow %q, %s: counted %d (%d indexed + %d ended unindexed), want %d", wf, st, got, counts[st], unindexed[st], want[st])
			}
		}
	}
	checkQueriesAgainstModel(t, on, rng, states, tasks, true)
}

// A list or count that would read more of the ended index than its budget
// says so (taskread reports it as the archive's error) rather than leave
// tasks out.
func TestQueryTasksUnindexedBudget(t *testing.T) {
	on, _, _ := newUnindexedStore(t)
	for i := range 5 {
		endTask(t, on, fmt.Sprintf("t%d", i), "wf", "succeeded", t0.Add(time.Duration(i)*time.Second), t0.Add(time.Minute))
	}
	q := store.TaskQuery{Namespace: "default", Limit: 10, Unindexed: true, MaxEndedScan: 3, State: reevev1.TaskState_TASK_STATE_SUCCEEDED}
	if _, err := on.QueryTasks(ctx(t), q); !errors.Is(err, store.ErrEndedBacklog) {
		t.Fatalf("a page over its ended budget: %v, want ErrEndedBacklog", err)
	}
	q.MaxEndedScan = 0
	page, err := on.QueryTasks(ctx(t), q)
	if err != nil || len(page.Tasks) != 5 || page.Next != nil {
		t.Fatalf("with the default budget: %d tasks, next %v, %v; want all 5", len(page.Tasks), page.Next, err)
	}
}
