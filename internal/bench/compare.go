package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
)

// CompareReport is the outcome of RunCompare: the same load without and
// with the archive.
type CompareReport struct {
	Off *Report `json:"off"`
	On  *Report `json:"on"`
	// Ratio is On's figures over Off's: above 1 for throughput is faster
	// with the archive, above 1 for latencies slower.
	Ratio CompareRatio `json:"ratio"`
}

// CompareRatio holds on/off ratios, rounded to three decimals (0 where the
// off figure is 0).
type CompareRatio struct {
	TasksPerSec float64 `json:"tasks_per_sec"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
}

// RunCompare runs cfg's load twice, each on a fresh embedded etcd and
// scheduler: first without an archive, then with cfg.ArchiveDSN (needed;
// ArchivePG starts its server for the second run only). With cfg.DataDir
// the runs use its subdirectories off/ and on/. The run without an archive
// keeps cfg.Retention (72h by default), so its ended tasks stay in etcd as
// they would without an archive.
func RunCompare(ctx context.Context, cfg Config) (*CompareReport, error) {
	if !cfg.Embedded {
		return nil, errors.New("bench: compare: needs embedded mode (each run gets a fresh etcd)")
	}
	if cfg.ArchiveDSN == "" {
		return nil, errors.New("bench: compare: needs an archive DSN for the second run")
	}
	off, on := cfg, cfg
	off.ArchiveDSN = ""
	if cfg.DataDir != "" {
		off.DataDir, on.DataDir = filepath.Join(cfg.DataDir, "off"), filepath.Join(cfg.DataDir, "on")
	}
	offRep, err := Run(ctx, off)
	if err != nil {
		return nil, fmt.Errorf("without the archive: %w", err)
	}
	runtime.GC() // the second run starts from a collected heap too
	onRep, err := Run(ctx, on)
	if err != nil {
		return nil, fmt.Errorf("with the archive: %w", err)
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return math.Round(a/b*1000) / 1000
	}
	return &CompareReport{Off: offRep, On: onRep, Ratio: CompareRatio{
		TasksPerSec: ratio(onRep.TasksPerSec, offRep.TasksPerSec),
		P50Ms:       ratio(onRep.P50Ms, offRep.P50Ms),
		P99Ms:       ratio(onRep.P99Ms, offRep.P99Ms),
	}}, nil
}
