package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/cluster"
	"github.com/reeve-org/reeve/internal/cluster/clustertest"
	"github.com/reeve-org/reeve/internal/demo"
	"github.com/reeve-org/reeve/internal/verify"
)

// A rolling upgrade from the last release (the commit in RELEASED, built
// from git history) to this Reeve, under load: 3 etcd members, 2
// schedulers, 2 supervisors and 3 demo agents start on the release; then
// one process at a time is stopped and started again as this Reeve
// (scheduler, supervisor, scheduler, supervisor, the agents), each running
// mixed with the others for a while, while a client submits demo orders
// through both schedulers. No acknowledged task is lost (each ends
// SUCCEEDED, and reeve verify finds them all), at most 1 % of submissions
// are refused (each tries every scheduler), reeve verify finds nothing
// else, and this Reeve's first scheduler wrote the layout version the
// release did not.
func TestRollingUpgradeFromTheRelease(t *testing.T) {
	reeve, etcd := clustertest.Reeve(t), clustertest.Tool(t, "etcd")
	released := clustertest.Released(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c := clustertest.Start(ctx, t, cluster.Config{Dir: t.TempDir(), Reeve: released, Etcd: etcd, NoFsync: true,
		Schedulers: 2, Supervisors: 2, Agents: 3, SessionTTL: 3, Workflows: demo.Workflows(),
		AgentArgs: func(int) []string { return []string{"--demo"} }})
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	layout := func() string {
		t.Helper()
		resp, err := cli.Get(ctx, "/reeve/meta/layout-version")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	if v := layout(); v != "" {
		t.Fatalf("the release wrote a layout version %q: RELEASED names a commit with the layout check", v)
	}
	var clients []reevev1.SchedulerServiceClient
	for _, addr := range c.SchedulerAddrs {
		clients = append(clients, schedulerClient(t, addr))
	}

	l := startLoad(ctx, clients, 100*time.Millisecond)
	time.Sleep(3 * time.Second) // all on the release
	for _, p := range slices.Concat(c.Schedulers[:1], c.Supervisors[:1], c.Schedulers[1:], c.Supervisors[1:], c.Agents) {
		if err := p.Stop(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		p.SetBinary(reeve)
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		if p.Addr != "" {
			if err := c.WaitServing(ctx, p.Addr); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%s upgraded: %s", p.Name, l.summary())
		time.Sleep(4 * time.Second) // mixed versions under load
	}
	if v := layout(); v != "1" {
		t.Errorf("layout version %q after the upgrade, want \"1\"", v)
	}
	time.Sleep(2 * time.Second) // all on this Reeve
	acked, refused, tried := l.stop()
	t.Logf("submissions: %d tried, %d acknowledged, %d refused", tried, len(acked), refused)
	if tried < 100 {
		t.Errorf("only %d submissions: the load did not run", tried)
	}
	if refused*100 > tried {
		t.Errorf("%d of %d submissions refused, more than 1 %%", refused, tried)
	}
	for _, id := range acked {
		waitTerminal(ctx, t, clients[0], id, true)
	}
	var expect []verify.TaskRef
	for _, id := range acked {
		expect = append(expect, verify.TaskRef{Namespace: "default", ID: id})
	}
	rep, err := verify.Check(ctx, cli, verify.Options{Expect: expect})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations {
		t.Errorf("reeve verify: %s %s/%s %s: %s", v.Kind, v.Namespace, v.TaskID, v.Key, v.Detail)
	}
	t.Logf("reeve verify: %d tasks, %d index keys, %d violations", rep.Tasks, rep.IndexKeys, len(rep.Violations))
}

// load submits a demo order every interval, each to the next scheduler in
// turn and, when that one refuses it, to the others (same task id: a retry
// is idempotent), for up to 5 s; a submission no scheduler acknowledged in
// that time is refused.
type load struct {
	mu      sync.Mutex
	acked   []string
	refused int
	tried   int
	cancel  context.CancelFunc
	done    chan struct{}
}

func startLoad(ctx context.Context, clients []reevev1.SchedulerServiceClient, every time.Duration) *load {
	ctx, cancel := context.WithCancel(ctx)
	l := &load{cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	go func() {
		defer close(l.done)
		defer wg.Wait()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			id := fmt.Sprintf("up-%05d", n)
			wg.Go(func() { l.submit(ctx, clients, n, id) })
		}
	}()
	return l
}

func (l *load) submit(ctx context.Context, clients []reevev1.SchedulerServiceClient, n int, id string) {
	give := time.Now().Add(5 * time.Second)
	for try := 0; ; try++ {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_, err := clients[(n+try)%len(clients)].SubmitTask(cctx, demoOrder(id))
		cancel()
		l.mu.Lock()
		switch {
		case err == nil:
			l.tried++
			l.acked = append(l.acked, id)
			l.mu.Unlock()
			return
		case time.Now().After(give), status.Code(err) == codes.InvalidArgument, status.Code(err) == codes.AlreadyExists:
			l.tried++
			l.refused++
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
	}
}

func (l *load) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d submissions, %d acknowledged, %d refused", l.tried, len(l.acked), l.refused)
}

// stop ends the load once the submissions in flight are answered.
func (l *load) stop() (acked []string, refused, tried int) {
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acked), l.refused, l.tried
}
