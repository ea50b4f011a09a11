package etcdtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/etcdtest"
)

func TestRestartKeepsDataAndEndpoints(t *testing.T) {
	m := etcdtest.New(t)
	c := m.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	before := m.Endpoints()[0]
	m.Restart()
	if got := m.Endpoints()[0]; got != before {
		t.Fatalf("endpoint changed across restart: %s -> %s", before, got)
	}
	resp, err := c.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("after restart got %v, want k=v", resp.Kvs)
	}
}
