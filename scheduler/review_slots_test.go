package scheduler_test

import (
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/supervisor"
)

// Review of slot deadlines (an attempt holding a max_running slot has its
// complete-by in the slot key's value, not in deadlines/) against what
// reads the deadline index besides the recovery pass.

// The "nothing stuck" gauges (reeve.steps.overdue, and the oldest age)
// count an overdue attempt holding a slot as they count one with a
// deadline key: here no supervisor recovers anything, and both attempts,
// one of a limited type and one of a type without a limit, are overdue.
func TestOverdueGaugeCountsSlotDeadlines(t *testing.T) {
	env, s, c := newEnv(t)
	q := queues(t, s)
	setLimit(t, q, &reevev1.SetQueueLimitRequest{Type: "erp", MaxRunning: 1})
	waitApplied(t, q, "erp", 1)
	reader := sdkmetric.NewManualReader()
	// Never run: it only observes its gauges (any supervisor does, leader
	// or not).
	sup, err := supervisor.New(env.Etcd.Client(), []reevev1.SupervisorServiceClient{reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))},
		supervisor.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	_ = sup
	a := testenv.ConnectRaw(t, s.Addr, register("a", 4, "erp", "free"))
	for _, typ := range []string{"erp", "free"} {
		sp := step("a", typ)
		sp.Timeout = durationpb.New(time.Second)
		submit(t, c, &reevev1.SubmitTaskRequest{Workflow: inline(sp)})
		a.NextAssignment(wait)
	}
	waitFlowKeys(t, env, 1, "erp running")
	var n int64
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if n = testenv.GaugeSum(t, reader, "reeve.steps.overdue", nil); n >= 2 {
			break
		}
	}
	if n != 2 {
		t.Errorf("reeve.steps.overdue %d with two attempts past their complete-by, one holding a max_running slot; want 2", n)
	}
}
