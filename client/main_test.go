package client_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every watch, stream and connection of a test ends with it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// etcd's and grpc's process-wide background goroutines.
		goleak.IgnoreTopFunction("go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*serverWatchStream).sendLoop"),
		goleak.IgnoreAnyFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		goleak.IgnoreAnyFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}
