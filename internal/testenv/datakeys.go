package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DataKeys returns every key under the default prefix /reeve/ but the
// liveness records of schedulers and agents (agents/, agent-load/,
// disconnected/) and the
// markers schedulers write at start (meta/), with its mod revision: any
// write a request makes changes it, so comparing two calls shows whether a
// refused request changed anything.
func DataKeys(t testing.TB, c *clientv3.Client) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, "/reeve/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		switch {
		case strings.HasPrefix(k, "/reeve/schedulers/"), strings.HasPrefix(k, "/reeve/agents/"),
			strings.HasPrefix(k, "/reeve/agent-load/"), strings.HasPrefix(k, "/reeve/disconnected/"), strings.HasPrefix(k, "/reeve/meta/"):
			continue
		}
		out[k] = kv.ModRevision
	}
	return out
}
