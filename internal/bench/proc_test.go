package bench

import (
	"os"
	"testing"
)

func TestProcSamplerReadsThisProcess(t *testing.T) {
	p := &procSampler{pid: os.Getpid()}
	stop := p.start()
	x := 0
	for i := range 20_000_000 { // some CPU time
		x += i
	}
	_ = x
	stop()
	cpu, rss := p.report()
	if cpu <= 0 || rss < 1 {
		t.Fatalf("cpu %v s, peak RSS %v MB; want both positive", cpu, rss)
	}
}
