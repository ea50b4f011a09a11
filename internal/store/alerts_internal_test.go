package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
)

// WatchAlerts reads the alerts there are in pages (here of 2), all at one
// revision, delivers the unacknowledged ones in order, then the ones
// written later.
func TestWatchAlertsReadsInPagesThenFollows(t *testing.T) {
	old := alertPage
	alertPage = 2
	t.Cleanup(func() { alertPage = old })
	c := etcdtest.New(t).Client()
	s := New(c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	put := func(i int, acked bool) {
		a := &reevev1.Alert{Namespace: "default", Id: fmt.Sprintf("%020d-t%d", i, i), TaskId: fmt.Sprintf("t%d", i), Acknowledged: acked}
		val, err := marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Put(ctx, s.k.alerts("default")+a.GetId(), val); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 7 {
		put(i, i%3 == 1) // t1 and t4 acknowledged
	}
	got := make(chan string, 10)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = s.WatchAlerts(wctx, "default", func(a *reevev1.Alert) error {
			got <- a.GetTaskId()
			return nil
		})
	}()
	for _, want := range []string{"t0", "t2", "t3", "t5", "t6"} {
		select {
		case id := <-got:
			if id != want {
				t.Fatalf("got alert of %s, want %s", id, want)
			}
		case <-ctx.Done():
			t.Fatalf("no alert of %s", want)
		}
	}
	put(7, false)
	select {
	case id := <-got:
		if id != "t7" {
			t.Fatalf("got alert of %s after the read, want t7", id)
		}
	case <-ctx.Done():
		t.Fatal("the alert written later never came")
	}
}
