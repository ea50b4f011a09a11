package bench

import (
	"maps"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"time"
)

// windowLength is the width of a latency window: the tail of a long run is
// reported per window so that a slow stretch (an etcd compaction, the
// retention sweep, a neighbour's burst) shows where a whole-run p99 hides it.
const windowLength = 5 * time.Second

// Window is the latency of the tasks that completed in one windowLength of
// the run. Latencies are submit→completed, in milliseconds.
type Window struct {
	// StartSec is the window's start, in seconds after the load began.
	StartSec  float64 `json:"start_sec"`
	Completed int     `json:"completed"`
	// Refused counts the submissions refused (RESOURCE_EXHAUSTED) in the
	// window; they are not in its latencies.
	Refused int     `json:"refused"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
}

// windows groups task latencies by when the task completed.
type windows struct {
	origin time.Time
	mu     sync.Mutex
	by     map[int][]time.Duration // window index → latencies
	refuse map[int]int             // window index → refusals
}

func newWindows(origin time.Time) *windows {
	return &windows{origin: origin, by: map[int][]time.Duration{}, refuse: map[int]int{}}
}

// add records a task that completed now after latency lat.
func (w *windows) add(lat time.Duration) {
	i := int(time.Since(w.origin) / windowLength)
	w.mu.Lock()
	w.by[i] = append(w.by[i], lat)
	w.mu.Unlock()
}

// refused records a submission refused now.
func (w *windows) refused() {
	i := int(time.Since(w.origin) / windowLength)
	w.mu.Lock()
	w.refuse[i]++
	w.mu.Unlock()
}

// report returns every window from the first to the last that saw a
// completion, empty ones included (a stall shows as a window with none).
func (w *windows) report() []Window {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.by) == 0 && len(w.refuse) == 0 {
		return nil
	}
	last := slices.Max(append(slices.Collect(maps.Keys(w.by)), slices.Collect(maps.Keys(w.refuse))...))
	out := make([]Window, 0, last+1)
	for i := 0; i <= last; i++ {
		win := Window{StartSec: (time.Duration(i) * windowLength).Seconds(), Completed: len(w.by[i]), Refused: w.refuse[i]}
		win.P50Ms, _, win.P99Ms, win.MaxMs = percentiles(w.by[i])
		out = append(out, win)
	}
	return out
}

// runtimeSample is what the Go runtime counted up to one instant: heap
// allocations and the CPU time it estimates for GC and for everything.
type runtimeSample struct {
	mallocs, allocBytes uint64
	numGC               uint32
	gcCPU, usedCPU      float64 // seconds
}

var cpuMetrics = []string{
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/user:cpu-seconds",
	"/cpu/classes/scavenge/total:cpu-seconds",
}

func sampleRuntime() runtimeSample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := make([]metrics.Sample, len(cpuMetrics))
	for i, name := range cpuMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	f := func(i int) float64 {
		if s[i].Value.Kind() != metrics.KindFloat64 {
			return 0
		}
		return s[i].Value.Float64()
	}
	return runtimeSample{
		mallocs: ms.Mallocs, allocBytes: ms.TotalAlloc, numGC: ms.NumGC,
		gcCPU: f(0), usedCPU: f(0) + f(1) + f(2),
	}
}

// runtimeDelta is what happened between two samples, per completed task.
func runtimeDelta(before, after runtimeSample, completed int) (allocsPerTask, allocBytesPerTask, gcFraction float64, gcCycles int) {
	n := float64(max(1, completed))
	allocsPerTask = float64(after.mallocs-before.mallocs) / n
	allocBytesPerTask = float64(after.allocBytes-before.allocBytes) / n
	if used := after.usedCPU - before.usedCPU; used > 0 {
		gcFraction = (after.gcCPU - before.gcCPU) / used
	}
	return allocsPerTask, allocBytesPerTask, gcFraction, int(after.numGC - before.numGC)
}
