package telemetry_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/reeve-org/reeve/agentsdk"
	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/telemetry"
	"github.com/reeve-org/reeve/internal/testenv"
)

// The Prometheus endpoint shows what happened: tasks submitted, completed
// and compensated, a supervisor recovery, queue-wait and run-time
// histograms, connected agents, etcd transaction latency, and the gauges an
// operator alerts on.
func TestPrometheusMetrics(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{Service: "reeve-test", Prometheus: true, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	if tel.Tracing() {
		t.Fatal("tracing on without any OTEL_* variable")
	}
	web := httptest.NewServer(tel.MetricsHandler())
	t.Cleanup(web.Close)

	tr := startTraced(t, otel.GetMeterProvider(), map[string]agentsdk.HandlerFunc{
		"book":   func(context.Context, *agentsdk.Step) (any, error) { return nil, nil },
		"unbook": func(context.Context, *agentsdk.Step) (any, error) { return nil, nil },
		"pay": func(ctx context.Context, s *agentsdk.Step) (any, error) {
			if s.Attempt == 1 {
				<-ctx.Done() // expires: the supervisor retries it
				return nil, ctx.Err()
			}
			return nil, agentsdk.Permanent(errors.New("card declined"))
		},
	})
	book := &reevev1.StepSpec{Name: "book", Type: "book", Timeout: durationpb.New(10 * time.Second), Compensation: &reevev1.CompensationSpec{Type: "unbook"}}
	pay := &reevev1.StepSpec{Name: "pay", Type: "pay", DependsOn: []string{"book"}, Timeout: durationpb.New(500 * time.Millisecond),
		RetryPolicy: &reevev1.RetryPolicy{MaxAttempts: 3, InitialBackoff: durationpb.New(50 * time.Millisecond)},
		Escalation:  reevev1.Escalation_ESCALATION_COMPENSATE}
	for id, steps := range map[string][]*reevev1.StepSpec{"ok": {book}, "undone": {book, pay}} {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		_, err := tr.client.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: id,
			Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "m", Steps: steps}}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitTask(t, tr.client, "default", "ok", wait)
	testenv.WaitTask(t, tr.client, "default", "undone", wait)

	// Counters are updated just after the record changes: scrape until the
	// last one shows (bounded).
	var body string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		body = scrape(t, web.URL)
		if (value(body, `reeve_tasks_compensated_total`) == 1 && value(body, `reeve_steps_in_flight`) == 0) || time.Now().After(deadline) {
			break
		}
	}
	for _, c := range []struct {
		series string
		want   func(float64) bool
	}{
		{`reeve_tasks_submitted_total`, eq(2)},
		{`reeve_tasks_completed_total`, eq(1)},
		{`reeve_tasks_compensated_total`, eq(1)},
		{`reeve_supervisor_recoveries_total{reeve_supervisor_action="retry"`, eq(1)},
		{`reeve_step_queue_wait_seconds_count`, atLeast(4)}, // ok/book, undone/book, pay#1, pay#2, unbook
		{`reeve_step_run_time_seconds_count`, atLeast(3)},
		// The attribute sets the scheduler memoizes (scheduler/telemetry.go).
		{`reeve_tasks_submitted_total{reeve_namespace="default"`, eq(2)},
		{`reeve_step_queue_wait_seconds_count{reeve_namespace="default",reeve_step_compensation="false",reeve_step_type="pay"`, eq(2)},
		{`reeve_step_queue_wait_seconds_count{reeve_namespace="default",reeve_step_compensation="true",reeve_step_type="unbook"`, eq(1)},
		{`reeve_step_run_time_seconds_count{reeve_namespace="default",reeve_step_compensation="false",reeve_step_outcome="failed",reeve_step_type="pay"`, atLeast(1)},
		{`reeve_steps_in_flight`, eq(0)},
		{`reeve_agents_connected{reeve_namespace="default",reeve_step_type="pay"`, eq(1)},
		{`reeve_tasks{reeve_namespace="default",reeve_task_state="TASK_STATE_RUNNING"`, eq(0)},
		{`reeve_tasks{reeve_namespace="default",reeve_task_state="TASK_STATE_PENDING"`, eq(0)},
		{`reeve_steps_overdue_oldest_age_seconds`, eq(0)},
		{`reeve_etcd_txn_duration_seconds_count{reeve_etcd_operation="write_tasks"`, atLeast(3)},
		{`reeve_etcd_txn_conflicts_total{reeve_etcd_conflict_cause="concurrent_writer"`, atLeast(0)},
		// What the Grafana dashboard (deploy/grafana) shows besides the above.
		{`reeve_tasks_completed_total{reeve_workflow_name="m"`, eq(1)},
		{`reeve_tasks_compensated_total{reeve_workflow_name="m"`, eq(1)},
		{`reeve_supervisor_leader`, eq(1)},
		{`reeve_steps_overdue`, eq(0)},
		{`reeve_steps_queued{reeve_namespace="default",reeve_step_type="pay"`, eq(0)},
		{`reeve_steps_queued_oldest_age_seconds{reeve_namespace="default",reeve_step_type="pay"`, eq(0)},
		{`reeve_etcd_db_size_bytes`, atLeast(1)},
		{`reeve_etcd_db_size_in_use_bytes`, atLeast(1)},
		{`reeve_etcd_db_quota_bytes`, atLeast(1)},
	} {
		if v := value(body, c.series); !c.want(v) {
			t.Errorf("%s: %v", c.series, v)
		}
	}

	// A step no agent serves waits in its queue: the queue depth and the age
	// of its oldest step show it, per step type.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	_, err = tr.client.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "stuck",
		Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{Name: "m",
			Steps: []*reevev1.StepSpec{{Name: "a", Type: "nobody-serves-this", Timeout: durationpb.New(10 * time.Second)}}}}})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	const stuck = `{reeve_namespace="default",reeve_step_type="nobody-serves-this"`
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		body = scrape(t, web.URL)
		if (value(body, `reeve_steps_queued`+stuck) == 1 && value(body, `reeve_steps_queued_oldest_age_seconds`+stuck) > 0.2) || time.Now().After(deadline) {
			break
		}
	}
	if n, age := value(body, `reeve_steps_queued`+stuck), value(body, `reeve_steps_queued_oldest_age_seconds`+stuck); n != 1 || age <= 0.2 {
		t.Errorf("a step nobody serves: queued %v (want 1), oldest age %vs (want > 0.2)", n, age)
	}
	if t.Failed() {
		var ours []string
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "reeve_") && !strings.Contains(l, "_bucket{") {
				ours = append(ours, l)
			}
		}
		t.Log(strings.Join(ours, "\n"))
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %v %s", err, resp.Status)
	}
	return string(b)
}

var sample = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$`)

// value sums the samples of series (`name{label="v",...`: the name, then
// labels that must all be present, in any order); -1 when there are none.
func value(body, series string) float64 {
	name, labels, _ := strings.Cut(series, "{")
	var want []string
	for _, l := range strings.Split(labels, ",") {
		if l != "" {
			want = append(want, l)
		}
	}
	sum, found := 0.0, false
lines:
	for _, line := range strings.Split(body, "\n") {
		m := sample.FindStringSubmatch(line)
		if m == nil || m[1] != name {
			continue
		}
		for _, l := range want {
			if !strings.Contains(m[2], l) {
				continue lines
			}
		}
		if v, err := strconv.ParseFloat(m[3], 64); err == nil {
			sum, found = sum+v, true
		}
	}
	if !found {
		return -1
	}
	return sum
}

func eq(want float64) func(float64) bool      { return func(v float64) bool { return v == want } }
func atLeast(want float64) func(float64) bool { return func(v float64) bool { return v >= want } }
