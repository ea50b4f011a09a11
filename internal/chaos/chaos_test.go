package chaos_test

import (
	"context"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/chaos"
	"github.com/reeve-org/reeve/internal/cluster/clustertest"
	"github.com/reeve-org/reeve/internal/pgtest"
)

// logWriter sends progress lines to t.Log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// The short chaos run of `make test`: 300 tasks (5 of them wide, ~15 for
// operator retries, ~25 with waits) submitted over 30 s while processes are killed and
// links degraded, then every invariant checked. It runs the production
// configuration: etcd, schedulers, supervisors, agents and the operators
// over mutual TLS with role checks, no call of a component refused.
// REEVE_CHAOS_SEED replays a seed.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run skipped in -short mode")
	}
	// The archive as production runs it: a server that accepts TLS only,
	// verified, with client-certificate authentication.
	certs := pgtest.IssueCerts(t)
	pg := pgtest.StartServerTLS(t, certs.TLS(true))
	archiveDSN := pg.DSN("postgres") + "&sslcert=" + url.QueryEscape(certs.ClientCert) + "&sslkey=" + url.QueryEscape(certs.ClientKey)
	cfg := chaos.Config{
		Tasks: 300, WideTasks: 5, Rate: 10, FaultEvery: time.Second, DrainTimeout: 2 * time.Minute,
		Dir: t.TempDir(), Reeve: clustertest.Reeve(t), Etcd: clustertest.Tool(t, "etcd"), Toxiproxy: clustertest.Tool(t, "toxiproxy-server"),
		Log: logWriter{t}, Secure: true,
		// Production's configuration: finished tasks move to a PostgreSQL
		// archive the schedulers share, over TLS, during the faults.
		ArchiveDSN: archiveDSN,
	}
	if s := os.Getenv("REEVE_CHAOS_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("REEVE_CHAOS_SEED: %v", err)
		}
		cfg.Seed = seed
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	_ = rep.WriteTable(&b, 50)
	t.Log("\n" + b.String())
	if rep.Submitted != cfg.Tasks {
		t.Errorf("submitted %d of %d tasks", rep.Submitted, cfg.Tasks)
	}
	if rep.FaultsTotal == 0 || rep.Samples == 0 {
		t.Errorf("a run without faults (%d) or samples (%d) proves nothing", rep.FaultsTotal, rep.Samples)
	}
	if rep.WideTasks != cfg.WideTasks || rep.RetryTasks == 0 || rep.TasksRetried == 0 {
		t.Errorf("%d wide tasks (want %d), %d retry tasks of which %d retried: the run did not exercise them", rep.WideTasks, cfg.WideTasks, rep.RetryTasks, rep.TasksRetried)
	}
	// Work that waits: completions by token and by name, repeats,
	// deferrals, sleeps and delayed starts (the variants rotate, so a short
	// run has each; a deadline that fires depends on timing, and is counted).
	if w := rep.Waits; w.CompletedByToken == 0 || w.CompletedByName == 0 || w.RepeatsAnsweredAsFirst == 0 || w.Deferred == 0 || w.Sleeps == 0 || w.DelayedStarts == 0 {
		t.Errorf("waits %+v: the run did not exercise them", w)
	}
	if rep.Archived == 0 {
		t.Error("no task was read from the archive: the run did not exercise the move")
	}
	if !rep.OK() {
		t.Fatalf("%d invariant violations; replay with REEVE_CHAOS_SEED=%d", len(rep.Violations), rep.Seed)
	}
}
