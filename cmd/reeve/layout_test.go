package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/reeve-org/reeve/internal/etcdserver"
	"github.com/reeve-org/reeve/internal/etcdtest"
)

// Every command that writes to etcd (bench's embedded mode too), and
// verify, ends at once with an error naming both versions when a newer
// Reeve wrote etcd's layout.
func TestNewerLayoutEndsTheProcess(t *testing.T) {
	m := etcdtest.New(t)
	ep := m.Endpoints()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.Client().Put(ctx, "/reeve/meta/layout-version", "99"); err != nil {
		t.Fatal(err)
	}
	// reeve dev's own etcd, written by a newer Reeve before this one starts.
	dir := t.TempDir()
	e, err := etcdserver.Start(ctx, etcdserver.Config{DataDir: filepath.Join(dir, "etcd"), Fast: true, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client().Put(ctx, "/reeve/meta/layout-version", "99"); err != nil {
		t.Fatal(err)
	}
	e.Close()

	for _, args := range [][]string{
		{"scheduler", "--etcd-endpoints", ep, "--listen", "127.0.0.1:0"},
		{"supervisor", "--etcd-endpoints", ep, "--schedulers", "127.0.0.1:1"},
		{"verify", "--etcd-endpoints", ep},
		{"dev", "--data-dir", dir, "--listen", "127.0.0.1:0", "--console-listen", ""},
		{"bench", "--embedded", "--data-dir", filepath.Join(dir, "etcd"), "--tasks", "1"},
	} {
		code, _, errOut := reeve(t, "", args...)
		if code == 0 || !strings.Contains(errOut, "etcd layout version 99") || !strings.Contains(errOut, "knows (1)") {
			t.Errorf("reeve %s: exit %d, stderr %q; want a failure naming versions 99 and 1", args[0], code, errOut)
		}
	}
}

// A scheduler started while etcd is down waits to check the layout version
// before it serves its API, alive (liveness SERVING) but not ready, and
// serves once etcd is back.
func TestSchedulerStartedWithEtcdDownWaitsForTheLayoutCheck(t *testing.T) {
	m := etcdtest.New(t)
	m.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"scheduler", "--etcd-endpoints", m.Endpoints()[0], "--listen", "127.0.0.1:0", "--health-listen", "127.0.0.1:0"}, &out, &errOut, func(string) string { return "" })
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("scheduler did not stop within 30s")
		}
	}()
	health := healthAddr(t, &out, &errOut, done)
	waitHealth(t, health, "liveness", healthpb.HealthCheckResponse_SERVING)
	waitHealth(t, health, "", healthpb.HealthCheckResponse_NOT_SERVING)
	if strings.Contains(errOut.String()+out.String(), "scheduler listening") {
		t.Fatal("the scheduler serves its API before it checked the layout version")
	}
	m.Restart()
	waitHealth(t, health, "", healthpb.HealthCheckResponse_SERVING)
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(errOut.String()+out.String(), "scheduler listening"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the scheduler does not serve once etcd is back:\n%s%s", out.String(), errOut.String())
		}
	}
	got, err := m.Client().Get(context.Background(), "/reeve/meta/layout-version")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "1" {
		t.Errorf("layout version: %v, %v; want \"1\"", got, err)
	}
}
