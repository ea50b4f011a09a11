package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

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
