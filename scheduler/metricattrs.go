package scheduler

import (
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// maxAttrSets bounds the memoized attribute sets; past it, sets are built
// per measurement as before.
const maxAttrSets = 4096

// attrSets memoizes the attribute sets of the scheduler's per-task
// measurements. metric.WithAttributes copies, sorts and deduplicates its
// attributes into a new set on every call (several allocations per task
// for each counter and histogram), while the sets repeat: they are keyed
// by namespace, step type, workflow and outcome. The key's first element
// names the measurement.
type attrSets struct {
	mu sync.Mutex
	m  map[[5]string]metric.MeasurementOption
}

func (c *attrSets) get(key [5]string, attrs func() []attribute.KeyValue) metric.MeasurementOption {
	c.mu.Lock()
	o, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return o
	}
	o = metric.WithAttributeSet(attribute.NewSet(attrs()...))
	c.mu.Lock()
	if c.m == nil {
		c.m = map[[5]string]metric.MeasurementOption{}
	}
	if len(c.m) < maxAttrSets {
		c.m[key] = o
	}
	c.mu.Unlock()
	return o
}

func boolKey(b bool) string { return strconv.FormatBool(b) }
