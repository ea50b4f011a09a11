package store

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// WithMeterProvider sets where the store's etcd metrics go (latency of the
// transactions that write task records, their lost compares, and records
// of unknown versions left as they are: versions.go); default
// the global provider, a no-op unless telemetry is set up.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(s *Store) { s.meters = mp }
}

// storeMetrics are the store's instruments.
type storeMetrics struct {
	txn       metric.Float64Histogram
	conflicts metric.Int64Counter
}

var (
	opWrite = metric.WithAttributeSet(attribute.NewSet(attribute.String("reeve.etcd.operation", "write_tasks")))
	// Why a compare failed: another writer changed the record, or the
	// record cache held an old revision (see WithRecordCache).
	causeWriter = metric.WithAttributeSet(attribute.NewSet(attribute.String("reeve.etcd.operation", "write_tasks"), attribute.String("reeve.etcd.conflict_cause", "concurrent_writer")))
	causeCache  = metric.WithAttributeSet(attribute.NewSet(attribute.String("reeve.etcd.operation", "write_tasks"), attribute.String("reeve.etcd.conflict_cause", "stale_cache")))
)

// storeMeter is the meter of the store's instruments, from mp or, when nil,
// the global provider.
func storeMeter(mp metric.MeterProvider) metric.Meter {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	return mp.Meter("github.com/reeve-org/reeve/internal/store")
}

func newStoreMetrics(mp metric.MeterProvider) storeMetrics {
	m := storeMeter(mp)
	txn, _ := m.Float64Histogram("reeve.etcd.txn.duration", metric.WithUnit("s"),
		metric.WithDescription("Latency of the etcd transactions that write task records (each carries 1 to 128 task writes, see group commit)"),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
	conflicts, _ := m.Int64Counter("reeve.etcd.txn.conflicts",
		metric.WithDescription("Task writes whose compare failed (the write is re-applied on the fresh record), by cause"))
	// Export the conflict series from the start, so that rate() and alerts
	// work before the first conflict.
	conflicts.Add(context.Background(), 0, causeWriter)
	conflicts.Add(context.Background(), 0, causeCache)
	return storeMetrics{txn: txn, conflicts: conflicts}
}

func (m storeMetrics) observe(ctx context.Context, _ int, start time.Time) {
	m.txn.Record(ctx, time.Since(start).Seconds(), opWrite)
}

func (m storeMetrics) lostCompare(cached bool) {
	if cached {
		m.conflicts.Add(context.Background(), 1, causeCache)
		return
	}
	m.conflicts.Add(context.Background(), 1, causeWriter)
}
