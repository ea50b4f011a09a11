package store_test

import (
	"testing"

	"github.com/reeve-org/reeve/internal/etcdtest"
	"github.com/reeve-org/reeve/internal/store"
)

// Space reads the quota and the database in use over the network and
// through the in-process client `reeve dev` uses (which has no endpoints).
func TestSpace(t *testing.T) {
	m := etcdtest.New(t, etcdtest.WithQuotaBytes(64<<20))
	for name, c := range map[string]*store.Store{"network": store.New(m.Client()), "in-process": store.New(m.InProcessClient())} {
		sp, err := c.Space(ctx(t))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if sp.Quota != 64<<20 || sp.InUse <= 0 || sp.Size < sp.InUse || sp.NoSpace || sp.Fraction() <= 0 || sp.Fraction() >= 0.5 {
			t.Fatalf("%s: space %+v (%s)", name, sp, sp)
		}
	}
}

// `reeve dev` reclaims space through its in-process client, and etcd's
// in-process maintenance server panics on Defragment (a flood against
// reeve dev crashed the whole process): Reclaim defragments through the
// store's defragmenter instead, and works through both kinds of client.
func TestReclaimThroughAnInProcessClient(t *testing.T) {
	m := etcdtest.New(t, etcdtest.WithQuotaBytes(64<<20))
	for name, c := range map[string]*store.Store{"network": store.New(m.Client()), "in-process": store.New(m.InProcessClient(), store.WithDefragmenter(m.Defragment))} {
		if _, _, err := c.CreateTask(ctx(t), record("t-"+name)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sp, err := c.Reclaim(ctx(t))
		if err != nil {
			t.Fatalf("%s: reclaim: %v", name, err)
		}
		if sp.NoSpace || sp.InUse <= 0 {
			t.Fatalf("%s: space after reclaim %+v", name, sp)
		}
	}
}
