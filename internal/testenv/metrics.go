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
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || m.Name != name {
				continue
			}
			for _, dp := range sum.DataPoints {
				if match == nil || match(dp.Attributes) {
					n += dp.Value
				}
			}
		}
	}
	return n
}
