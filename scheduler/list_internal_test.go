package scheduler

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/internal/etcdtest"
)

// Past WithMaxConcurrentLists a list waits about a second for a slot, then
// is refused with RESOURCE_EXHAUSTED; a freed slot is taken again.
func TestListSlotsRefusePastTheLimit(t *testing.T) {
	s := New(etcdtest.New(t).Client(), WithMaxConcurrentLists(2))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r1, err := s.adm.acquireList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := s.adm.acquireList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := s.adm.acquireList(ctx); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third list: %v, want RESOURCE_EXHAUSTED", err)
	}
	if waited := time.Since(start); waited < listWait/2 {
		t.Fatalf("refused after %v, want a wait of about %v first", waited, listWait)
	}
	r1()
	r3, err := s.adm.acquireList(ctx)
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	r2()
	r3()
}
