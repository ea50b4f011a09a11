package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/archive"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
)

// With --archive-dsn the embedded scheduler moves every ended task to the
// archive; with --archive-wait the run waits until etcd holds none, and the
// report counts them, what they cost in the archive, and that no
// acknowledged task is missing from etcd and the archive together.
func TestBenchArchiveSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "archive.db")
	rep := benchJSON(t, "--embedded", "--tasks", "300", "--concurrency", "32", "--archive-dsn", "sqlite:"+path,
		"--archive-grace", "100ms", "--archive-interval", "100ms", "--archive-wait", "1m", "-o", "json")
	if rep["completed"] != 300.0 || rep["errors"] != 0.0 {
		t.Fatalf("completed %v, errors %v (%v); want 300 and 0", rep["completed"], rep["errors"], rep["first_error"])
	}
	if rep["archive"] != true || rep["archive_dsn"] != "sqlite:"+path {
		t.Errorf("archive %v, archive_dsn %v; want true and sqlite:%s", rep["archive"], rep["archive_dsn"], path)
	}
	if rep["archive_tasks"] != 300.0 || rep["etcd_tasks_at_end"] != 0.0 {
		t.Errorf("archive_tasks %v, etcd_tasks_at_end %v; want every task moved: 300 and 0", rep["archive_tasks"], rep["etcd_tasks_at_end"])
	}
	if b, ok := rep["archive_bytes_per_task"].(float64); !ok || b <= 0 {
		t.Errorf("archive_bytes_per_task %v; want a positive number", rep["archive_bytes_per_task"])
	}
	if _, ok := rep["etcd_db_in_use_end_mb"].(float64); !ok {
		t.Errorf("etcd_db_in_use_end_mb %v; want a number", rep["etcd_db_in_use_end_mb"])
	}
	if rep["lost_checked"] != 300.0 || rep["lost_sample"] != "all" || rep["lost"] != 0.0 {
		t.Errorf("lost_checked %v (%v), lost %v (%v); want 300 (all) and 0", rep["lost_checked"], rep["lost_sample"], rep["lost"], rep["first_lost"])
	}

	// Every archived task reads back whole: its record decodes, and it
	// succeeded.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := archive.Open(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tasks, err := a.List(ctx, archive.Query{Namespace: "default", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 300 {
		t.Fatalf("the archive lists %d tasks; want 300", len(tasks))
	}
	for _, lt := range tasks {
		at, err := a.Get(ctx, "default", lt.ID)
		if err != nil {
			t.Fatalf("get archived task %s: %v", lt.ID, err)
		}
		rec := &storev1.TaskRecord{}
		if err := proto.Unmarshal(at.Record, rec); err != nil {
			t.Fatalf("archived task %s: record does not decode: %v", lt.ID, err)
		}
		if rec.GetTask().GetId() != lt.ID || rec.GetTask().GetState() != reevev1.TaskState_TASK_STATE_SUCCEEDED {
			t.Fatalf("archived task %s: record of %q in state %v; want itself, SUCCEEDED", lt.ID, rec.GetTask().GetId(), rec.GetTask().GetState())
		}
	}
}

// --archive-compare runs the load without and then with the archive and
// prints both with the on/off ratios as one JSON object.
func TestBenchArchiveCompare(t *testing.T) {
	path := filepath.Join(t.TempDir(), "archive.db")
	rep := benchJSON(t, "--embedded", "--tasks", "200", "--concurrency", "32", "--archive-compare",
		"--archive-dsn", "sqlite:"+path, "--archive-grace", "100ms", "--archive-interval", "100ms", "-o", "json")
	off, okOff := rep["off"].(map[string]any)
	on, okOn := rep["on"].(map[string]any)
	ratio, okRatio := rep["ratio"].(map[string]any)
	if !okOff || !okOn || !okRatio {
		t.Fatalf("want objects off, on and ratio: %v", rep)
	}
	if off["archive"] != false || on["archive"] != true {
		t.Errorf("off.archive %v, on.archive %v; want false and true", off["archive"], on["archive"])
	}
	for name, r := range map[string]map[string]any{"off": off, "on": on} {
		if r["completed"] != 200.0 || r["errors"] != 0.0 {
			t.Errorf("%s: completed %v, errors %v; want 200 and 0", name, r["completed"], r["errors"])
		}
	}
	if on["lost_checked"] != 200.0 || on["lost"] != 0.0 {
		t.Errorf("on: lost_checked %v, lost %v; want 200 and 0", on["lost_checked"], on["lost"])
	}
	for _, f := range []string{"tasks_per_sec", "p50_ms", "p99_ms"} {
		if v, ok := ratio[f].(float64); !ok || v <= 0 {
			t.Errorf("ratio.%s %v; want a positive number", f, ratio[f])
		}
	}
}

func TestBenchArchiveBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--embedded", "--archive-compare"},                              // nothing to compare with
		{"bench", "--embedded", "--archive-grace", "1s"},                          // no archive
		{"bench", "--embedded", "--archive-wait", "1m"},                           // no archive
		{"bench", "--embedded", "--archive-dsn", ""},                              // empty
		{"bench", "--embedded", "--archive-dsn", "pg", "--archive-grace", "0s"},   // moves need a grace
		{"bench", "--embedded", "--archive-dsn", "pg", "--archive-interval", "0"}, // never moves
		{"bench", "--embedded", "--archive-dsn", "pg", "--archive-wait", "-1s"},
		{"bench", "--embedded", "--archive-dsn", "pg", "--recovery"},
		{"bench", "--address", "127.0.0.1:1", "--etcd-endpoints", "http://127.0.0.1:2", "--archive-dsn", "pg"},                            // a throwaway server is embedded only
		{"bench", "--address", "127.0.0.1:1", "--etcd-endpoints", "http://127.0.0.1:2", "--archive-dsn", "sqlite:x", "--archive-compare"}, // compare is embedded only
	} {
		if code, stdout, stderr := reeveEnv(t, nil, args...); code != exitUsage || stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and no output", args, code, stdout, stderr, exitUsage)
		}
	}
}
