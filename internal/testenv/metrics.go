package testenv

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// CounterSum collects reader and returns the sum of the int64 counter
// name over its data points whose attributes match (nil: all of them).
func CounterSum(t testing.TB, reader *sdkmetric.ManualReader, name string, match func(attribute.Set) bool) int64 {
	t.Helper()
	return sumOf(t, reader, name, match, func(d metricdata.Aggregation) ([]metricdata.DataPoint[int64], bool) {
		sum, ok := d.(metricdata.Sum[int64])
		return sum.DataPoints, ok
	})
}

// GaugeSum is CounterSum for an int64 gauge.
func GaugeSum(t testing.TB, reader *sdkmetric.ManualReader, name string, match func(attribute.Set) bool) int64 {
	t.Helper()
	return sumOf(t, reader, name, match, func(d metricdata.Aggregation) ([]metricdata.DataPoint[int64], bool) {
		g, ok := d.(metricdata.Gauge[int64])
		return g.DataPoints, ok
	})
}

func sumOf(t testing.TB, reader *sdkmetric.ManualReader, name string, match func(attribute.Set) bool,
	points func(metricdata.Aggregation) ([]metricdata.DataPoint[int64], bool)) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			dps, ok := points(m.Data)
			if !ok || m.Name != name {
				continue
			}
			for _, dp := range dps {
				if match == nil || match(dp.Attributes) {
					n += dp.Value
				}
			}
		}
	}
	return n
}
