package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/etcdtest"
)

// The space guard counts the live work (ready and deadline keys) again only
// once something was written since its last count: an idle store with many
// waiting timers costs etcd no count every check.
func TestSpaceGuardCountsLiveWorkOnlyAfterAWrite(t *testing.T) {
	c := etcdtest.New(t).Client()
	s := New(c)
	g := &spaceGuard{opts: &s.opts, store: s.store, log: s.log}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "/reeve/deadlines/00000000000000000001/default/t/s/1", ""); err != nil {
		t.Fatal(err)
	}
	g.refresh(ctx)
	g.refresh(ctx)
	if got := g.last.Load(); g.counts != 1 || got.live != 1 {
		t.Fatalf("after two checks with no write between: %d counts, %d live; want 1 count of 1", g.counts, got.live)
	}
	if _, err := c.Put(ctx, "/reeve/ready/default/t/s", ""); err != nil {
		t.Fatal(err)
	}
	g.refresh(ctx)
	if got := g.last.Load(); g.counts != 2 || got.live != 2 {
		t.Fatalf("after a write: %d counts, %d live; want a second count of 2", g.counts, got.live)
	}
}
