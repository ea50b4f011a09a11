package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/reeve-org/reeve/internal/etcdserver"
)

// RawReport is etcd's own transaction throughput, the floor under Reeve.
type RawReport struct {
	Mode        string  `json:"mode"`
	Txns        int     `json:"txns"`
	Concurrency int     `json:"concurrency"`
	DurationSec float64 `json:"duration_sec"`
	TxnsPerSec  float64 `json:"txns_per_sec"`
}

// RawEtcd runs txns transactions shaped like a task transition (one compare,
// two puts, one delete) from concurrency clients against an embedded etcd
// configured as Run's embedded mode (fsync on unless NoFsync), through the
// same in-process client.
func RawEtcd(ctx context.Context, cfg Config, txns int) (*RawReport, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "reeve-bench-raw-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	etcd, err := etcdserver.Start(ctx, etcdserver.Config{DataDir: dir, UnsafeNoFsync: cfg.NoFsync, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer etcd.Close()
	cli := etcd.Client()
	payload := string(make([]byte, 1500)) // about a one-step task record
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Concurrency)
	start := time.Now()
	for range cfg.Concurrency {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(txns) || ctx.Err() != nil {
					return
				}
				key := fmt.Sprintf("/raw/tasks/%09d", i)
				_, err := cli.Txn(ctx).
					If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
					Then(clientv3.OpPut(key, payload), clientv3.OpPut(fmt.Sprintf("/raw/index/%09d", i), ""), clientv3.OpDelete(fmt.Sprintf("/raw/ready/%09d", i))).
					Commit()
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return &RawReport{Mode: "raw-etcd", Txns: txns, Concurrency: cfg.Concurrency, DurationSec: elapsed.Seconds(), TxnsPerSec: float64(txns) / elapsed.Seconds()}, nil
}
