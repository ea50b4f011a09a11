package main

import (
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/spf13/cobra"

	"github.com/reeve-org/reeve/scheduler"
)

// perfFlags are the efficiency flags of the commands that run Reeve's
// processes (dev, scheduler, bench): a soft memory limit for the Go runtime
// (debug.SetMemoryLimit), the GC percentage (debug.SetGCPercent), the
// store's commit window and whether it compresses task records.
//
// A task allocates ~150 KB in a `reeve dev` process (etcd, scheduler and
// agents together), so with Go's default (GOGC=100, no limit) a process
// with a small live heap collects many times a second and spends 15–25 %
// of its CPU in the GC. A higher GC percentage lets the heap grow further
// between collections while it is small, and the memory limit makes the GC
// work harder instead of growing the heap past it. See docs/limits.md.
type perfFlags struct {
	limit    string
	percent  int
	window   time.Duration
	compress bool
	// compressChosen: REEVE_RECORD_COMPRESSION chose compress.
	compressChosen bool
	getenv         func(string) string
}

// Defaults of the memory limit.
const (
	cgroupLimitRatio = 0.9 // of the container's memory limit, when there is one
	// Outside a container: half of the machine's memory, at least
	// minDefaultMemoryLimit, or that when the machine's is unknown. The
	// limit is soft: a live heap near it makes the GC run continuously (up
	// to half the CPU), and the live heap of a process holding etcd grows
	// with the history etcd keeps in memory, so a fixed 1 GiB made a
	// 10-minute soak at 1,000 tasks/s spend 53 % of its CPU in the GC and
	// fall behind for good (docs/benchmarks.md, "Issue 15, fifth pass").
	systemLimitRatio      = 0.5
	minDefaultMemoryLimit = 1 << 30
)

// register adds the flags, with defPercent the command's default
// --gc-percent and defCompress its default --record-compression.
func (f *perfFlags) register(cmd *cobra.Command, getenv func(string) string, defPercent int, defCompress bool) {
	f.getenv = getenv
	cmd.Flags().StringVar(&f.limit, "memory-limit", getenv("REEVE_MEMORY_LIMIT"),
		"soft memory limit of the Go runtime, e.g. 512MiB or 2GiB, or off (env REEVE_MEMORY_LIMIT); default: GOMEMLIMIT when set, else 90% of the container's (cgroup) memory limit, else half of the machine's memory (at least 1GiB)")
	def := defPercent
	if v, err := strconv.Atoi(getenv("REEVE_GC_PERCENT")); err == nil {
		def = v
	}
	cmd.Flags().IntVar(&f.percent, "gc-percent", def,
		"GC percentage: heap growth over the live heap that triggers a collection, -1 for none below the memory limit (env REEVE_GC_PERCENT); GOGC when set and the flag is not given")
	cmd.Flags().DurationVar(&f.window, "commit-window", time.Millisecond,
		"adaptive commit window: while task writes arrive less than this apart, a small batch waits up to this long for company in one etcd transaction; 0 turns it off")
	if v, err := strconv.ParseBool(getenv("REEVE_RECORD_COMPRESSION")); err == nil {
		defCompress, f.compressChosen = v, true
	}
	cmd.Flags().BoolVar(&f.compress, "record-compression", defCompress,
		"write task records compressed (zstd with a built-in dictionary: about a third of their size, less written to etcd per task); on by default with an archive (--archive-dsn); every process reading this etcd must run a Reeve that reads them, 1bf7b76 or later (env REEVE_RECORD_COMPRESSION)")
}

// compressWithArchive turns record compression on when the process runs
// with an archive and neither --record-compression nor
// REEVE_RECORD_COMPRESSION chose: with an archive a task is written to etcd
// for its live work only, and compressed records are what brings its WAL
// bytes under the budget of issue 34 (docs/benchmarks.md). The throughput
// targets, measured without an archive, keep the command's default.
func (f *perfFlags) compressWithArchive(cmd *cobra.Command, archive bool) {
	if archive && !f.compressChosen && !cmd.Flags().Changed("record-compression") {
		f.compress = true
	}
}

// schedulerOptions are the scheduler options the flags set.
func (f *perfFlags) schedulerOptions() []scheduler.Option {
	return []scheduler.Option{scheduler.WithCommitWindow(f.window), scheduler.WithRecordCompression(f.compress)}
}

// apply sets the runtime's memory limit and GC percentage from the flags.
// An explicit flag (or REEVE_ variable) wins over GOMEMLIMIT and GOGC,
// which win over the defaults. It returns what it set, for the log.
func (f *perfFlags) apply(cmd *cobra.Command) (limit int64, percent int, err error) {
	if f.window < 0 {
		return 0, 0, usagef("--commit-window: want 0 (off) or a positive duration, got %s", f.window)
	}
	limit, err = f.memoryLimit(cmd.Flags().Changed("memory-limit") || f.getenv("REEVE_MEMORY_LIMIT") != "")
	if err != nil {
		return 0, 0, usagef("--memory-limit: %v", err)
	}
	percent = f.percent
	explicit := cmd.Flags().Changed("gc-percent") || f.getenv("REEVE_GC_PERCENT") != ""
	switch {
	case percent < -1:
		return 0, 0, usagef("--gc-percent: want -1 (off) or a percentage, got %d", percent)
	case !explicit && f.getenv("GOGC") != "":
		percent = debug.SetGCPercent(-1) // read the runtime's value (from GOGC) ...
		debug.SetGCPercent(percent)      // ... and keep it
	case percent == -1 && limit == math.MaxInt64:
		return 0, 0, usagef("--gc-percent: -1 (no collection below the memory limit) needs a --memory-limit")
	default:
		debug.SetGCPercent(percent)
	}
	debug.SetMemoryLimit(limit)
	return limit, percent, nil
}

// memoryLimit resolves --memory-limit; math.MaxInt64 means none.
func (f *perfFlags) memoryLimit(explicit bool) (int64, error) {
	if explicit || f.limit != "" {
		if strings.EqualFold(f.limit, "off") {
			return math.MaxInt64, nil
		}
		return parseBytes(f.limit)
	}
	if f.getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1), nil // the runtime parsed it
	}
	if cg, err := memlimit.FromCgroup(); err == nil && cg > 0 && cg < math.MaxInt64 {
		return int64(float64(cg) * cgroupLimitRatio), nil
	}
	sys, err := memlimit.FromSystem()
	return systemMemoryLimit(sys, err), nil
}

// systemMemoryLimit is the default limit outside a container, for a machine
// with total bytes of memory (err: unknown).
func systemMemoryLimit(total uint64, err error) int64 {
	if err != nil || total == 0 || total > math.MaxInt64 {
		return minDefaultMemoryLimit
	}
	return max(minDefaultMemoryLimit, int64(float64(total)*systemLimitRatio))
}

// parseBytes parses a size such as 512MiB, 2GiB, 1.5GB or 1048576 (bytes).
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
	}
	num, mult := strings.TrimSpace(s), 1.0
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) || v*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("want a positive size such as 512MiB or 2GiB, or off; got %q", s)
	}
	if v*mult < 16<<20 {
		return 0, fmt.Errorf("%q is below 16MiB: the process would spend its time collecting", s)
	}
	return int64(v * mult), nil
}
