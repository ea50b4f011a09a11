package bench

import (
	"context"
	"math"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// alarmSampler reads etcd's alarm list every second and records whether
// NOSPACE was ever raised.
type alarmSampler struct {
	cli  *clientv3.Client
	seen bool
}

func (a *alarmSampler) nospace(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := a.cli.AlarmList(ctx)
	if err != nil {
		return false
	}
	for _, m := range resp.Alarms {
		if m.GetAlarm() == etcdserverpb.AlarmType_NOSPACE {
			return true
		}
	}
	return false
}

func (a *alarmSampler) start() (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if a.nospace(context.Background()) {
					a.seen = true
				}
			}
		}
	}()
	return func() { close(quit); <-done }
}

// end reads the alarm list once more, after the run.
func (a *alarmSampler) end(ctx context.Context) bool { return a.nospace(ctx) }

// dbSampler records etcd's database size every second of the run, and the
// part in use every 10 seconds.
type dbSampler struct {
	size             func() (total, inUse int64)
	start0, max, end int64
	maxInUse         int64
	inUse            []int64
}

func (d *dbSampler) start() (stop func()) {
	if d.size == nil {
		return func() {}
	}
	var used int64
	d.start0, used = d.size()
	d.max, d.maxInUse = d.start0, used
	d.inUse = append(d.inUse, used)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-quit:
				return
			case <-t.C:
				total, used := d.size()
				d.max = max(d.max, total)
				d.maxInUse = max(d.maxInUse, used)
				if n%10 == 0 {
					d.inUse = append(d.inUse, used)
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		var used int64
		d.end, used = d.size()
		d.max = max(d.max, d.end)
		d.maxInUse = max(d.maxInUse, used)
		d.inUse = append(d.inUse, used)
	}
}

func (d *dbSampler) report() (startMB, maxMB, endMB float64, inUseMB []float64) {
	mb := func(b int64) float64 { return math.Round(float64(b)/(1<<20)*10) / 10 }
	for _, u := range d.inUse {
		inUseMB = append(inUseMB, mb(u))
	}
	return mb(d.start0), mb(d.max), mb(d.end), inUseMB
}
