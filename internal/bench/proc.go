package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procSampler follows another process's CPU time and resident memory
// through /proc (Linux), every 250ms of the run.
type procSampler struct {
	pid        int
	cpu0, cpu1 float64
	peakRSS    int64 // bytes
}

func (p *procSampler) start() (stop func()) {
	if p.pid <= 0 {
		return func() {}
	}
	p.cpu0 = procCPU(p.pid)
	p.peakRSS = procRSS(p.pid)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				p.peakRSS = max(p.peakRSS, procRSS(p.pid))
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		p.cpu1 = procCPU(p.pid)
		p.peakRSS = max(p.peakRSS, procRSS(p.pid))
	}
}

func (p *procSampler) report() (cpuSec, peakRSSMB float64) {
	if p.pid <= 0 {
		return 0, 0
	}
	return p.cpu1 - p.cpu0, float64(p.peakRSS) / (1 << 20)
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times on Linux.
const clockTicks = 100

// procCPU returns the user+system CPU seconds of pid, 0 when unknown.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may contain spaces; fields after its ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / clockTicks
}

// procRSS returns the resident set size of pid in bytes, 0 when unknown.
func procRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func peakRSSMB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024 // Linux reports KiB
}
