package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/etcdtest"
	"github.com/reeve-org/reeve/internal/store"
)

// createPaced creates n tasks, one every gap, each from its own goroutine
// (as concurrent submitters do), and waits for all of them.
func createPaced(t *testing.T, s *store.Store, prefix string, n int, gap time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	tick := time.NewTicker(gap)
	defer tick.Stop()
	for i := range n {
		<-tick.C
		wg.Go(func() { _, _, errs[i] = s.CreateTask(ctx(t), record(fmt.Sprintf("%s%03d", prefix, i))) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %s%03d: %v", prefix, i, err)
		}
	}
}

// Writes that arrive one at a time but faster than the commit window share
// transactions: without the window each would find an idle committer and
// pay a transaction (and an fsync) of its own.
//
// The batches are cut by count, not by time: with batches of 40, a held
// batch is cut once it holds 10 writes (a quarter), and the window (2 s) is
// far longer than 10 writes 20 ms apart take to arrive. One committer: with
// several, one that finishes a slow commit takes the batch another is
// holding (by design: only one holds), so the count would follow the
// machine's commit latency. So the count of transactions does not depend
// on how late a loaded machine runs the writes, commits or wakes the
// committer: it would take writes 500 ms apart on average, 25 times the
// pacing, or a committer asleep 2 s past its window several times over, to
// reach the bound.
func TestCommitWindowGroupsPacedWrites(t *testing.T) {
	s := store.New(etcdtest.New(t).Client(), store.WithCommitWindow(2*time.Second), store.WithGroupCommit(40, 1))
	// Warm up: the store learns that writes come 20 ms apart.
	createPaced(t, s, "warm", 30, 20*time.Millisecond)
	before := s.WriteStats()
	createPaced(t, s, "t", 40, 20*time.Millisecond)
	after := s.WriteStats()
	txns, writes := after.Txns-before.Txns, after.TaskWrites-before.TaskWrites
	t.Logf("%d paced writes in %d transactions", writes, txns)
	if writes != 40 || txns > writes/4 {
		t.Fatalf("%d writes 20 ms apart took %d transactions; want at most %d (a batch is held until it has 10 writes or for 2 s)", writes, txns, writes/4)
	}
}

// A write to an idle store is not held for company: the window applies only
// when writes have been arriving less than a window apart. The window is a
// minute, so that a held write could not pass for a slow one.
func TestCommitWindowDoesNotHoldALoneWrite(t *testing.T) {
	const window = time.Minute
	s := store.New(etcdtest.New(t).Client(), store.WithCommitWindow(window))
	for i := range 5 {
		began := time.Now()
		wctx, cancel := context.WithTimeout(context.Background(), 2*window)
		_, _, err := s.CreateTask(wctx, record(fmt.Sprintf("lone%d", i)))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(began); took >= window {
			t.Fatalf("lone write %d took %s: held for the %s window", i, took, window)
		}
	}
}
