package supervisor_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/supervisor"
)

// A supervisor started on an etcd whose layout a newer Reeve wrote refuses
// to start, naming both versions, before it campaigns: no election key is
// written.
func TestNewerLayoutRefusesToStart(t *testing.T) {
	env := testenv.New(t)
	cli := env.Etcd.Client()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := cli.Put(ctx, "/reeve/meta/layout-version", "99"); err != nil {
		t.Fatal(err)
	}
	sup, err := supervisor.New(cli, []reevev1.SupervisorServiceClient{reevev1.NewSupervisorServiceClient(nil)}, supervisor.WithLogger(testenv.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	for name, start := range map[string]func(context.Context) error{"CheckLayout": sup.CheckLayout, "Run": sup.Run} {
		err := start(ctx)
		if !errors.Is(err, store.ErrLayoutTooNew) || !strings.Contains(err.Error(), "version 99") || !strings.Contains(err.Error(), "knows (1)") {
			t.Errorf("%s: %v, want a refusal naming versions 99 and 1", name, err)
		}
	}
	if sup.Leading() {
		t.Error("the refused supervisor leads")
	}
	if got, err := cli.Get(ctx, "/reeve/supervisor/", clientv3.WithPrefix()); err != nil || len(got.Kvs) != 0 {
		t.Errorf("election keys after the refusal: %v, %v", got, err)
	}
}
