package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// etcdCounters are the counters of one etcd member that say how much it
// wrote (etcd v3.7: server/storage/wal/metrics.go and
// server/storage/mvcc/metrics.go). Every member applies the same raft log,
// so every member's counters grow alike; the bench reads one member's.
type etcdCounters struct {
	// WALBytes is etcd_disk_wal_write_bytes_total: bytes handed to the
	// write-ahead log (entries, raft hard states, CRC and framing, padding).
	WALBytes float64
	// Puts and Deletes are etcd_mvcc_put_total and etcd_mvcc_delete_total:
	// key writes applied (a delete-range counts once, however many keys).
	Puts, Deletes float64
	// PutBytes is etcd_debugging_mvcc_total_put_size_in_bytes: the key and
	// value bytes of those puts.
	PutBytes float64
}

var etcdMetricNames = map[string]func(*etcdCounters) *float64{
	"etcd_disk_wal_write_bytes_total":             func(c *etcdCounters) *float64 { return &c.WALBytes },
	"etcd_mvcc_put_total":                         func(c *etcdCounters) *float64 { return &c.Puts },
	"etcd_mvcc_delete_total":                      func(c *etcdCounters) *float64 { return &c.Deletes },
	"etcd_debugging_mvcc_total_put_size_in_bytes": func(c *etcdCounters) *float64 { return &c.PutBytes },
}

// sub is what was written between before (c0) and c.
func (c etcdCounters) sub(c0 etcdCounters) etcdCounters {
	return etcdCounters{WALBytes: c.WALBytes - c0.WALBytes, Puts: c.Puts - c0.Puts, Deletes: c.Deletes - c0.Deletes, PutBytes: c.PutBytes - c0.PutBytes}
}

// localEtcdCounters reads the counters of the etcd embedded in this process:
// etcd registers them on the default Prometheus registry. They are
// process-wide, so they are the embedded member's only while it is the one
// etcd of the process.
func localEtcdCounters(context.Context) (etcdCounters, error) {
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return etcdCounters{}, fmt.Errorf("etcd metrics: %w", err)
	}
	var c etcdCounters
	found := 0
	for _, mf := range families {
		field, ok := etcdMetricNames[mf.GetName()]
		if !ok || len(mf.GetMetric()) != 1 {
			continue
		}
		m := mf.GetMetric()[0]
		switch {
		case m.GetCounter() != nil:
			*field(&c) = m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			*field(&c) = m.GetGauge().GetValue()
		default:
			continue
		}
		found++
	}
	if found != len(etcdMetricNames) {
		return etcdCounters{}, fmt.Errorf("etcd metrics: %d of %d counters registered", found, len(etcdMetricNames))
	}
	return c, nil
}

// metricsURL is the /metrics address of an etcd client endpoint
// ("https://host:2379", or "host:2379", which is https when tlsCfg is set).
func metricsURL(endpoint string, tlsCfg *tls.Config) string {
	if !strings.Contains(endpoint, "://") {
		scheme := "http"
		if tlsCfg != nil {
			scheme = "https"
		}
		endpoint = scheme + "://" + endpoint
	}
	return strings.TrimRight(endpoint, "/") + "/metrics"
}

// scrapeEtcdCounters reads the counters from an etcd member's /metrics
// (Prometheus text format, served on its client URLs).
func scrapeEtcdCounters(ctx context.Context, hc *http.Client, url string) (etcdCounters, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return etcdCounters{}, fmt.Errorf("etcd metrics: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return etcdCounters{}, fmt.Errorf("etcd metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return etcdCounters{}, fmt.Errorf("etcd metrics: GET %s: %s", url, resp.Status)
	}
	c, err := parseEtcdCounters(bufio.NewScanner(resp.Body))
	if err != nil {
		return etcdCounters{}, fmt.Errorf("etcd metrics: GET %s: %w", url, err)
	}
	return c, nil
}

// parseEtcdCounters takes the counters, which have no labels, from
// Prometheus text lines "name value".
func parseEtcdCounters(sc *bufio.Scanner) (etcdCounters, error) {
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var c etcdCounters
	found := 0
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		field, known := etcdMetricNames[name]
		if !ok || !known {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return etcdCounters{}, fmt.Errorf("%s: %w", name, err)
		}
		*field(&c) = v
		found++
	}
	if err := sc.Err(); err != nil {
		return etcdCounters{}, err
	}
	if found != len(etcdMetricNames) {
		return etcdCounters{}, fmt.Errorf("%d of %d counters found", found, len(etcdMetricNames))
	}
	return c, nil
}
