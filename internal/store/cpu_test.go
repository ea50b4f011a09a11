package store_test

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the CPU time (user + system) this process used so far:
// with the in-process etcd client, etcd's work too.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per operation since start as
// "cpu-ns/op": unlike ns/op it does not grow when other processes take the
// machine's cores.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
}
