package store

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// WithMeterProvider sets where the store's etcd metrics go (transaction
// latency and compare conflicts of task writes); default the global
// provider, a no-op unless telemetry is set up.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(s *Store) { s.meters = mp }
}

// storeMetrics are the store's instruments.
type storeMetrics struct {
	txn       metric.Float64Histogram
	conflicts metric.Int64Counter
}

func newStoreMetrics(mp metric.MeterProvider) storeMetrics {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter("github.com/reeve-org/reeve/internal/store")
	txn, _ := m.Float64Histogram("reeve.etcd.txn.duration", metric.WithUnit("s"),
		metric.WithDescription("Latency of the etcd transactions that write task records, by operation"),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
	conflicts, _ := m.Int64Counter("reeve.etcd.txn.conflicts",
		metric.WithDescription("Task writes whose compare failed because another writer changed the record first (each is retried)"))
	// Export the conflict series from the start, so that rate() and alerts
	// work before the first conflict.
	conflicts.Add(context.Background(), 0, opUpdate)
	return storeMetrics{txn: txn, conflicts: conflicts}
}

var (
	opCreate = metric.WithAttributeSet(attribute.NewSet(attribute.String("reeve.etcd.operation", "create_task")))
	opUpdate = metric.WithAttributeSet(attribute.NewSet(attribute.String("reeve.etcd.operation", "update_task")))
)

func (m storeMetrics) observe(ctx context.Context, op metric.MeasurementOption, start time.Time) {
	m.txn.Record(ctx, time.Since(start).Seconds(), op)
}
