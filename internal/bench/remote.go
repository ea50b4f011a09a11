package bench

import (
	"context"
	"crypto/tls"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func dialTarget(cfg Config) (*target, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.EtcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: cfg.EtcdTLS, Username: cfg.EtcdUsername, Password: cfg.EtcdPassword})
	if err != nil {
		return nil, err
	}
	return &target{
		sched: cfg.Schedulers,
		etcd:  cli,
		dbSize: func() (total, inUse int64) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := cli.Status(ctx, cfg.EtcdEndpoints[0])
			if err != nil {
				return 0, 0
			}
			return st.DbSize, st.DbSizeInUse
		},
		applied: func(ctx context.Context) (uint64, error) {
			st, err := cli.Status(ctx, cfg.EtcdEndpoints[0])
			if err != nil {
				return 0, err
			}
			return st.RaftIndex, nil
		},
		counters: remoteCounters(cli, cfg),
		close:    func() { _ = cli.Close() },
	}, nil
}

// remoteCounters reads the write counters from the /metrics of the leader
// among cfg.EtcdEndpoints (the first endpoint when none is), chosen at the
// first read and kept for the next: every member writes the same raft log,
// so one member's counters are what each member writes, and the leader is
// the member that bounds throughput.
func remoteCounters(cli *clientv3.Client, cfg Config) func(context.Context) (etcdCounters, error) {
	var tlsCfg *tls.Config
	if cfg.EtcdTLS != nil {
		tlsCfg = cfg.EtcdTLS.Clone()
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	url := ""
	return func(ctx context.Context) (etcdCounters, error) {
		if url == "" {
			ep := cfg.EtcdEndpoints[0]
			for _, e := range cfg.EtcdEndpoints {
				if st, err := cli.Status(ctx, e); err == nil && st.Leader == st.Header.GetMemberId() {
					ep = e
					break
				}
			}
			url = metricsURL(ep, cfg.EtcdTLS)
		}
		return scrapeEtcdCounters(ctx, hc, url)
	}
}
