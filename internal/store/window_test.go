package store_test

import (
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
// pay a transaction (and an fsync) of its own. The window is large here
// (300 ms against writes 20 ms apart) so that a loaded machine's commit
// latency does not decide the outcome.
func TestCommitWindowGroupsPacedWrites(t *testing.T) {
	s := store.New(etcdtest.New(t).Client(), store.WithCommitWindow(300*time.Millisecond))
	// Warm up: the store learns that writes come 20 ms apart.
	createPaced(t, s, "warm", 30, 20*time.Millisecond)
	before := s.WriteStats()
	createPaced(t, s, "t", 40, 20*time.Millisecond)
	after := s.WriteStats()
	txns, writes := after.Txns-before.Txns, after.TaskWrites-before.TaskWrites
	t.Logf("%d paced writes in %d transactions", writes, txns)
	if writes != 40 || txns > writes/4 {
		t.Fatalf("%d writes 20 ms apart took %d transactions; want at most %d (the window holds each batch open for 300 ms)", writes, txns, writes/4)
	}
}

// A write to an idle store is not held for company: the window applies only
// when writes have been arriving less than a window apart.
func TestCommitWindowDoesNotHoldALoneWrite(t *testing.T) {
	const window = 3 * time.Second
	s := store.New(etcdtest.New(t).Client(), store.WithCommitWindow(window))
	for i := range 5 {
		began := time.Now()
		if _, _, err := s.CreateTask(ctx(t), record(fmt.Sprintf("lone%d", i))); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(began); took >= window {
			t.Fatalf("lone write %d took %s: held for the %s window", i, took, window)
		}
	}
}
