package bench

import (
	"os"
	"testing"
	"time"
)

func TestProcSamplerReadsThisProcess(t *testing.T) {
	p := &procSampler{pid: os.Getpid()}
	stop := p.start()
	// Burn CPU until /proc shows it (10 ms ticks), at most 5 s.
	x := 0
	for deadline := time.Now().Add(5 * time.Second); procCPU(p.pid) <= p.cpu0+0.02 && time.Now().Before(deadline); {
		for i := range 1_000_000 {
			x += i
		}
	}
	_ = x
	stop()
	cpu, rss := p.report()
	if cpu <= 0 || rss < 1 {
		t.Fatalf("cpu %v s, peak RSS %v MB; want both positive", cpu, rss)
	}
}
