package bench

import (
	"bufio"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/reeve-org/reeve/internal/etcdtest"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

// A run reports what etcd wrote per task: at least each task's final record
// in key+value bytes put, more than that in write-ahead log bytes (which
// carry the puts and their framing), and at least one key write per
// transaction. Then the same etcd's /metrics, read as a running target's
// are, gives the counters the process's registry holds.
func TestRunReportsEtcdWritesPerTask(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const tasks = 50
	rep, err := Run(ctx, Config{Embedded: true, DataDir: dir, NoFsync: true, Tasks: tasks, Concurrency: 8, MaxDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Completed != tasks || rep.Errors != 0 {
		t.Fatalf("completed %d, errors %d (%s); want %d, 0", rep.Completed, rep.Errors, rep.FirstError, tasks)
	}

	// The task records as the run left them, from its data directory.
	etcd := etcdtest.New(t, etcdtest.WithDataDir(dir))
	cli := etcd.InProcessClient()
	resp, err := cli.Get(ctx, etcdKeys.Tasks(""), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != tasks {
		t.Fatalf("%d task records after the run, want %d", len(resp.Kvs), tasks)
	}
	var recordBytes int
	for _, kv := range resp.Kvs {
		recordBytes += len(kv.Key) + len(kv.Value)
	}
	meanRecord := float64(recordBytes) / tasks

	t.Logf("per task: %.2f txns, %.2f ops, %.0f bytes put, %.0f WAL bytes; final record %.0f bytes",
		rep.EtcdTxnsPerTask, rep.EtcdOpsPerTask, rep.EtcdPutBytesPerTask, rep.EtcdBytesPerTask, meanRecord)
	if rep.EtcdPutBytesPerTask < meanRecord {
		t.Errorf("etcd_put_bytes_per_task %.0f; want at least the final task record, %.0f bytes", rep.EtcdPutBytesPerTask, meanRecord)
	}
	if rep.EtcdBytesPerTask <= rep.EtcdPutBytesPerTask {
		t.Errorf("etcd_bytes_per_task %.0f; want more than the bytes put, %.0f", rep.EtcdBytesPerTask, rep.EtcdPutBytesPerTask)
	}
	if rep.EtcdOpsPerTask < 1 || rep.EtcdOpsPerTask < rep.EtcdTxnsPerTask {
		t.Errorf("etcd_ops_per_task %.2f; want at least 1 and at least etcd_txns_per_task %.2f", rep.EtcdOpsPerTask, rep.EtcdTxnsPerTask)
	}
	if rep.EtcdOpsPerTask > 100 || rep.EtcdBytesPerTask > 100_000 {
		t.Errorf("%.2f ops, %.0f WAL bytes per 1-step task: implausibly many", rep.EtcdOpsPerTask, rep.EtcdBytesPerTask)
	}

	before, err := localEtcdCounters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	scraped, err := scrapeEtcdCounters(ctx, http.DefaultClient, metricsURL(etcd.Endpoints()[0], nil))
	if err != nil {
		t.Fatal(err)
	}
	after, err := localEtcdCounters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name        string
		lo, got, hi float64
	}{
		{"wal bytes", before.WALBytes, scraped.WALBytes, after.WALBytes},
		{"puts", before.Puts, scraped.Puts, after.Puts},
		{"deletes", before.Deletes, scraped.Deletes, after.Deletes},
		{"put bytes", before.PutBytes, scraped.PutBytes, after.PutBytes},
	} {
		if f.got < f.lo || f.got > f.hi || f.got <= 0 {
			t.Errorf("/metrics %s %v; want positive, between the registry's %v and %v", f.name, f.got, f.lo, f.hi)
		}
	}
}

// The /metrics parser takes the four unlabelled counters, in either
// notation, and refuses a page that lacks one (an etcd that does not
// export it), rather than reporting zero writes.
func TestParseEtcdCounters(t *testing.T) {
	page := `# HELP etcd_disk_wal_write_bytes_total Total number of bytes written in WAL.
# TYPE etcd_disk_wal_write_bytes_total gauge
etcd_disk_wal_write_bytes_total 1.2345678e+07
etcd_mvcc_put_total 1000
etcd_mvcc_delete_total 250
etcd_mvcc_range_total 9
etcd_debugging_mvcc_total_put_size_in_bytes 123456
etcd_server_proposals_applied_total{foo="bar"} 7
`
	c, err := parseEtcdCounters(bufio.NewScanner(strings.NewReader(page)))
	if err != nil {
		t.Fatal(err)
	}
	if want := (etcdCounters{WALBytes: 12345678, Puts: 1000, Deletes: 250, PutBytes: 123456}); c != want {
		t.Errorf("parsed %+v, want %+v", c, want)
	}
	lacking := strings.ReplaceAll(page, "etcd_mvcc_delete_total 250\n", "")
	if _, err := parseEtcdCounters(bufio.NewScanner(strings.NewReader(lacking))); err == nil {
		t.Error("a page without etcd_mvcc_delete_total parsed; want an error")
	}
}

// A running target's etcd with client certificates serves /metrics over
// HTTPS on its client URL; the bench reads the counters there with the TLS
// configuration it reaches etcd with (--etcd-ca, --etcd-cert, --etcd-key).
func TestRemoteCountersOverTLS(t *testing.T) {
	dir := t.TempDir()
	if _, err := tlsconfig.Init(dir, []tlsconfig.CertSpec{{Name: "server", Server: true}, {Name: "bench"}}, tlsconfig.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	p := func(n string) string { return filepath.Join(dir, n) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := etcdtest.New(t, etcdtest.WithClientTLS(p("server.pem"), p("server-key.pem"), p("ca.pem")))
	tlsCfg, err := tlsconfig.Client(tlsconfig.Files{CA: p("ca.pem"), Cert: p("bench.pem"), Key: p("bench-key.pem")}, "")
	if err != nil {
		t.Fatal(err)
	}
	// Without a scheme, as clientv3 also takes endpoints: https, since TLS is set.
	cfg := Config{EtcdEndpoints: []string{strings.TrimPrefix(e.Endpoints()[0], "https://")}, EtcdTLS: tlsCfg}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.EtcdEndpoints, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	read := remoteCounters(cli, cfg)
	c0, err := read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "k", "value"); err != nil {
		t.Fatal(err)
	}
	c1, err := read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := c1.sub(c0); d.Puts < 1 || d.PutBytes < float64(len("k")+len("value")) || d.WALBytes <= d.PutBytes {
		t.Errorf("after one put, /metrics over TLS grew by %+v; want a put of at least 6 bytes, and more WAL bytes", d)
	}
}
