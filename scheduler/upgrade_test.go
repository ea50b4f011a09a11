package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// A store last written by a Reeve of the layout before issue 15's sixth
// pass also holds created/ and created-wf/ keys. A newer scheduler deletes
// them at start and lists every task, by state and without, from the state
// indexes alone.
func TestStartDropsTheOldLayoutsListingIndexes(t *testing.T) {
	env := testenv.New(t)
	s1 := env.StartScheduler("")
	submitMany(t, s1.Client(t), "old", 5, "wf", nil)
	s1.Stop()

	c := env.Etcd.Client()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	// What the older layout had for these tasks, and a key of a task an
	// older sweeper left behind.
	for i := range 6 {
		age := fmt.Sprintf("%020d", 7_000_000_000_000_000_000+i)
		if _, err := c.Txn(ctx).Then(
			clientv3.OpPut(fmt.Sprintf("/reeve/created/default/%s/old-%d", age, i), ""),
			clientv3.OpPut(fmt.Sprintf("/reeve/created-wf/default/wf/%s/old-%d", age, i), ""),
		).Commit(); err != nil {
			t.Fatal(err)
		}
	}

	s2 := env.StartScheduler("")
	left := func() int64 {
		var n int64
		for _, p := range []string{"/reeve/created/", "/reeve/created-wf/"} {
			resp, err := c.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatal(err)
			}
			n += resp.Count
		}
		return n
	}
	deadline := time.Now().Add(wait)
	for left() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d keys of the old listing indexes left %s after the scheduler started", left(), wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, req := range []*reevev1.ListTasksRequest{
		{PageSize: 100},
		{PageSize: 100, Workflow: "wf"},
		{PageSize: 2, Workflow: "wf"},
	} {
		var ids []string
		for range 10 {
			resp, err := s2.Client(t).ListTasks(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			for _, task := range resp.GetTasks() {
				ids = append(ids, task.GetId())
			}
			if resp.GetNextPageToken() == "" {
				break
			}
			req.PageToken = resp.GetNextPageToken()
		}
		slices.Sort(ids)
		if want := []string{"old-0000", "old-0001", "old-0002", "old-0003", "old-0004"}; !slices.Equal(ids, want) {
			t.Fatalf("listed %v, want %v", ids, want)
		}
	}
}
