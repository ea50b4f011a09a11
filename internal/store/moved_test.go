package store_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reeve-org/reeve/internal/store"
)

// The fingerprint is part of the stored layout: schedulers of one etcd
// must agree on it, so it never changes.
func TestFingerprintIsStable(t *testing.T) {
	// FNV-1a 64 of "default/order-1", computed independently.
	if got, want := store.Fingerprint("default", "order-1"), uint64(0xd2380576bc71a60b); got != want {
		t.Fatalf("Fingerprint(default, order-1) = %#x; want %#x", got, want)
	}
}

// A follower lists the moves since its start point, follows new ones, is
// synced to a revision by a progress request when nothing moves, and
// DeleteMovedBefore removes only older moves.
func TestWatchMovedListsFollowsAndSyncs(t *testing.T) {
	s, c := newStore(t)
	if err := s.PutMoved(ctx(t), t0, []uint64{3, 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutMoved(ctx(t), t0.Add(time.Hour), []uint64{2}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var got []store.MovedBatch
	var synced int64
	progress := make(chan struct{}, 1)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.WatchMoved(wctx, func() time.Time { return t0.Add(time.Minute) }, store.MovedFollower{
			Reset:    func() { mu.Lock(); got = nil; mu.Unlock() },
			Batch:    func(b store.MovedBatch) { mu.Lock(); got = append(got, b); mu.Unlock() },
			Synced:   func(rev int64) { mu.Lock(); synced = max(synced, rev); mu.Unlock() },
			Progress: progress,
		})
	}()
	defer func() { stop(); <-done }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			ok := cond()
			mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: batches %v, synced %d", what, got, synced)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("the listing: only the move after the start point", func() bool {
		return len(got) == 1 && slices.Equal(got[0].Fingerprints, []uint64{2}) && got[0].At.Equal(t0.Add(time.Hour))
	})

	if err := s.PutMoved(ctx(t), t0.Add(2*time.Hour), []uint64{9, 7}); err != nil {
		t.Fatal(err)
	}
	waitFor("a new move, its fingerprints sorted", func() bool {
		return len(got) == 2 && slices.Equal(got[1].Fingerprints, []uint64{7, 9})
	})

	// Something else changes etcd: the follower learns it covers that
	// revision only when it asks.
	resp, err := c.Put(ctx(t), "/reeve/unrelated", "x")
	if err != nil {
		t.Fatal(err)
	}
	progress <- struct{}{}
	waitFor("synced by a progress request", func() bool { return synced >= resp.Header.Revision })

	if err := s.DeleteMovedBefore(ctx(t), t0.Add(90*time.Minute)); err != nil {
		t.Fatal(err)
	}
	left, err := c.Get(ctx(t), "/reeve/moved/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || left.Count != 1 {
		t.Fatalf("after DeleteMovedBefore: %d keys left (%v); want the one move after the cutoff", left.Count, err)
	}
}
