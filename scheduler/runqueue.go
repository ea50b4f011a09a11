package scheduler

import (
	"runtime/metrics"
	"time"
)

// runQueueQuantile is the share of the goroutine wake-ups of an interval
// that waited at most what the CPU controller measures (WithOverloadCPU).
const runQueueQuantile = 0.9

// runQueueMetric is the Go runtime's histogram of how long goroutines
// stayed runnable before they ran: the process's run queue (runtime/metrics;
// the runtime records a sample of the transitions).
const runQueueMetric = "/sched/latencies:seconds"

// runQueue measures the process's run-queue wait, interval by interval:
// each wait call returns the runQueueQuantile of the waits recorded since
// the previous call. Not safe for concurrent use (overload.mu guards it).
type runQueue struct {
	sample []metrics.Sample
	last   []uint64 // the histogram's counts at the previous call
}

func newRunQueue() *runQueue {
	q := &runQueue{sample: []metrics.Sample{{Name: runQueueMetric}}}
	q.wait() // the baseline: the waits before now are not this interval's
	return q
}

// wait returns the runQueueQuantile of the run-queue waits recorded since
// the last call, or -1 when none were (or the runtime lacks the metric).
func (q *runQueue) wait() time.Duration {
	metrics.Read(q.sample)
	if q.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return -1
	}
	h := q.sample[0].Value.Float64Histogram()
	if len(q.last) != len(h.Counts) {
		q.last = make([]uint64, len(h.Counts))
	}
	var total uint64
	for i, c := range h.Counts {
		total += c - q.last[i]
	}
	defer copy(q.last, h.Counts)
	return histogramQuantile(h.Buckets, h.Counts, q.last, total, runQueueQuantile)
}

// histogramQuantile is the quantile p of the samples counts − last (total
// of them) in buckets (len(counts)+1 boundaries, in seconds): the lower
// boundary of the bucket holding it, or -1 when total is 0. A bucket
// bounded below by −Inf counts as 0.
func histogramQuantile(buckets []float64, counts, last []uint64, total uint64, p float64) time.Duration {
	if total == 0 {
		return -1
	}
	rank := uint64(p * float64(total)) // samples before the quantile's
	var seen uint64
	for i, c := range counts {
		if seen += c - last[i]; seen > rank {
			return time.Duration(max(buckets[i], 0) * float64(time.Second))
		}
	}
	return -1
}
