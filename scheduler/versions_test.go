package scheduler_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

// A scheduler started on an etcd whose layout a newer Reeve wrote refuses
// to start, naming both versions, and leaves the layout version as it is.
func TestNewerLayoutRefusesToStart(t *testing.T) {
	env := testenv.New(t)
	cli := env.Etcd.Client()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := cli.Put(ctx, "/reeve/meta/layout-version", "99"); err != nil {
		t.Fatal(err)
	}
	srv := scheduler.New(cli, scheduler.WithLogger(testenv.Logger()))
	for name, start := range map[string]func(context.Context) error{"CheckLayout": srv.CheckLayout, "Run": srv.Run} {
		err := start(ctx)
		if !errors.Is(err, store.ErrLayoutTooNew) || !strings.Contains(err.Error(), "version 99") || !strings.Contains(err.Error(), "knows (1)") {
			t.Errorf("%s: %v, want a refusal naming versions 99 and 1", name, err)
		}
	}
	got, err := cli.Get(ctx, "/reeve/meta/layout-version")
	if err != nil || string(got.Kvs[0].Value) != "99" {
		t.Fatalf("layout version after the refusal: %v, %v", got.Kvs, err)
	}
	// Another prefix is another installation: a scheduler starts there,
	// and writes its layout version.
	other := env.StartScheduler("", scheduler.WithPrefix("/other/"))
	submit(t, other.Client(t), &reevev1.SubmitTaskRequest{Workflow: inline(step("x", "t"))})
	if got, err := cli.Get(ctx, "/other/meta/layout-version"); err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "1" {
		t.Fatalf("layout version under /other/: %v, %v; want \"1\"", got.Kvs, err)
	}
}

// lockedBuffer is a log destination safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A task record a newer Reeve wrote (record version 2) is left as it is
// by every write through the API, an operator's cancel and a supervisor's
// recovery decision alike: each is refused with FAILED_PRECONDITION
// UNKNOWN_RECORD_VERSION naming both versions, the stored bytes do not
// change, and the scheduler counts and logs it. An agent that could run
// its step is not given it. GetTask still shows the task.
func TestRecordOfAnUnknownVersionIsLeftAlone(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	logs := &lockedBuffer{}
	env := testenv.New(t)
	s := env.StartScheduler("", scheduler.WithMeterProvider(mp), scheduler.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	c := s.Client(t)
	sup := reevev1.NewSupervisorServiceClient(testenv.Dial(t, s.Addr))
	cli := env.Etcd.Client()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "newer", Workflow: inline(step("x", "t"))})

	// What a newer Reeve's write leaves: the record in version 2.
	const key = "/reeve/tasks/default/newer"
	got, err := cli.Get(ctx, key)
	if err != nil || len(got.Kvs) != 1 {
		t.Fatal(got, err)
	}
	rec := &storev1.TaskRecord{}
	if err := store.UnmarshalRecord(got.Kvs[0].Value, rec); err != nil {
		t.Fatal(err)
	}
	rec.RecordVersion = 2
	want, err := proto.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, key, string(want)); err != nil {
		t.Fatal(err)
	}
	el, err := cli.Put(ctx, "/reeve/supervisor/election/v", "sup")
	if err != nil {
		t.Fatal(err)
	}
	fence := &reevev1.Fence{ElectionKey: "/reeve/supervisor/election/v", Revision: el.Header.Revision, SupervisorId: "sup"}

	refusals := map[string]func() error{
		"cancel": func() error {
			_, err := c.CancelTask(ctx, &reevev1.CancelTaskRequest{TaskId: "newer", Reason: "test"})
			return err
		},
		"recovery": func() error {
			resp, err := sup.RecoverSteps(ctx, &reevev1.RecoverStepsRequest{Fence: fence, Decisions: []*reevev1.RecoveryDecision{
				{TaskId: "newer", Step: "x", Attempt: 1, Action: reevev1.RecoveryAction_RECOVERY_ACTION_FAIL, Reason: "test"}}})
			if err != nil {
				return err
			}
			return status.FromProto(resp.GetOutcomes()[0].GetStatus()).Err()
		},
	}
	for name, call := range refusals {
		st := status.Convert(call())
		info := errorInfo(st)
		if st.Code() != codes.FailedPrecondition || info.GetReason() != scheduler.ReasonUnknownRecordVersion {
			t.Fatalf("%s: %v, want FAILED_PRECONDITION %s", name, st, scheduler.ReasonUnknownRecordVersion)
		}
		if m := info.GetMetadata(); m[scheduler.MetaRecordVersion] != "2" || m[scheduler.MetaKnownRecordVersion] != "1" || m[scheduler.MetaTaskID] != "newer" {
			t.Errorf("%s: metadata %v, want the record's version, the known one and the task", name, m)
		}
		if !strings.Contains(st.Message(), "version 2") || !strings.Contains(st.Message(), "knows (1)") {
			t.Errorf("%s: message %q does not name both versions", name, st.Message())
		}
	}
	// An agent that could run the step gets nothing: its claim leaves
	// the record alone, once (not again and again).
	agent := testenv.ConnectRaw(t, s.Addr, register("agent", 1, "t"))
	agent.Quiet(time.Second)
	refused := int64(len(refusals)) + 1

	after, err := cli.Get(ctx, key)
	if err != nil || !bytes.Equal(after.Kvs[0].Value, want) {
		t.Fatalf("the record of version 2 was rewritten: %v", err)
	}
	if n := counterSum(t, reader, "reeve.records.unknown_version"); n < refused || n > refused+2 {
		t.Errorf("reeve.records.unknown_version = %d, want about %d (one per refusal)", n, refused)
	}
	if l := logs.String(); !strings.Contains(l, "record of a newer Reeve left as it is") || !strings.Contains(l, "record_version=2") {
		t.Errorf("no log line about the record; logs:\n%s", l)
	}
	if got, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: "newer"}); err != nil || got.GetTask().GetState() != reevev1.TaskState_TASK_STATE_PENDING {
		t.Errorf("read of the record: %v, %v", got, err)
	}
}
