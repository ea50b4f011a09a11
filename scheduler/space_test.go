package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/etcdtest"
	"github.com/reeve-org/reeve/internal/testenv"
	"github.com/reeve-org/reeve/scheduler"
)

const testQuota = 16 << 20

// spaceWait bounds each wait of the space tests: filling 16 MiB, the
// guard's next reading, a reclaim. It guards against a hang only; on a
// loaded machine these take seconds, and no outcome depends on how many.
const spaceWait = 2 * time.Minute

// spaceEnv is a scheduler on an etcd with a 16 MiB quota, reading the space
// every 50ms, with an agent for steps "t" and their compensation "undo". It
// leaves reclaiming space to the test (the operator): reclaiming by itself,
// it would disarm NOSPACE whenever a defragmentation brings the database
// under 90% of the quota, which a full one may or may not reach.
func spaceEnv(t *testing.T) (*testenv.Env, reevev1.SchedulerServiceClient, *testenv.RawAgent, *clientv3.Client) {
	t.Helper()
	env := testenv.New(t, etcdtest.WithQuotaBytes(testQuota))
	s := env.StartScheduler("", scheduler.WithSpaceCheckInterval(50*time.Millisecond), scheduler.WithSpaceReclaim(0))
	agent := testenv.ConnectRaw(t, s.Addr, register("a1", 4, "t", "undo"))
	return env, s.Client(t), agent, env.Etcd.Client()
}

// fill writes 32 KiB values under /filler/, four to a transaction, until
// the database in use reaches fraction of the quota (overshooting it by
// less than 1%), or etcd refuses with NOSPACE (returned). Four to a
// transaction: one by one, with a status read each, filling 16 MiB took
// minutes under -race on a loaded machine.
func fill(t *testing.T, cli *clientv3.Client, fraction float64) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), spaceWait)
	defer cancel()
	val := strings.Repeat("x", 32<<10)
	inUse := func() int64 {
		st, err := cli.Status(ctx, cli.Endpoints()[0])
		if err != nil {
			t.Fatal(err)
		}
		return st.DbSizeInUse
	}
	// etcd updates the space in use when its backend commits (every
	// 100ms), so a write is not seen at once: after each one, wait until
	// it shows, and write half of what is missing, so that the filler
	// lands on the fraction instead of overshooting it by whatever was
	// written in one backend interval.
	target, n := int64(fraction*testQuota), 0
	for range 64 {
		cur := inUse()
		if cur >= target {
			st, _ := cli.Status(ctx, cli.Endpoints()[0])
			t.Logf("filled: %d bytes in use, database file %d bytes, quota %d", cur, st.DbSize, st.DbSizeQuota)
			return nil
		}
		var puts []clientv3.Op
		for range min(max((target-cur)/2/int64(len(val)), 1), 32) {
			puts = append(puts, clientv3.OpPut(fmt.Sprintf("/filler/%05d", n), val))
			n++
		}
		if _, err := cli.Txn(ctx).Then(puts...).Commit(); err != nil {
			if errors.Is(err, rpctypes.ErrGRPCNoSpace) || errors.Is(err, rpctypes.ErrNoSpace) {
				return err
			}
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Second); inUse() == cur && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Fatalf("after 64 rounds of filler the database is %d bytes in use, want %d", inUse(), target)
	return nil
}

// free deletes the filler, compacts, defragments and disarms alarms: what an
// operator does after a NOSPACE alarm.
func free(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), spaceWait)
	defer cancel()
	resp, err := cli.Delete(ctx, "/filler/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Defragment(ctx, cli.Endpoints()[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{}); err != nil {
		t.Fatal(err)
	}
}

// submitUntil submits until the answer's code is want and its message
// contains msg, polling the guard's refresh (bounded by spaceWait), and returns
// the last error and the task id of that submission (prefix-<n>).
func submitUntil(t *testing.T, c reevev1.SchedulerServiceClient, prefix string, want codes.Code, msg string) (error, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), spaceWait)
	defer cancel()
	for i := 0; ; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		_, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: id, Workflow: inline(step("x", "probe"))}) // no agent runs "probe"
		if status.Code(err) == want && strings.Contains(status.Convert(err).Message(), msg) {
			return err, id
		}
		if ctx.Err() != nil {
			t.Fatalf("submit %s: %v, want %v", id, err, want)
		}
		time.Sleep(20 * time.Millisecond) // the guard refreshes every 50ms
	}
}

// Near the quota, new tasks are refused with RESOURCE_EXHAUSTED and a
// message that says why, while a task already running finishes, including
// its compensation; once space is freed, submissions are accepted again.
func TestNearQuotaRefusesNewTasksWhileRunningOnesFinish(t *testing.T) {
	_, c, agent, cli := spaceEnv(t)
	undoable := step("a", "t")
	// Filling etcd can take long on a loaded machine; a result more than 1 s
	// past its complete-by would be refused as late.
	undoable.Timeout = durationpb.New(10 * time.Minute)
	undoable.Compensation = &reevev1.CompensationSpec{Type: "undo", Timeout: durationpb.New(10 * time.Minute)}
	b := step("b", "t", "a")
	b.Timeout = durationpb.New(10 * time.Minute)
	b.Escalation = reevev1.Escalation_ESCALATION_COMPENSATE
	submit(t, c, &reevev1.SubmitTaskRequest{TaskId: "running", Workflow: inline(undoable, b)})
	a := agent.NextAssignment(spaceWait)

	if err := fill(t, cli, 0.82); err != nil {
		t.Fatalf("filling to 82%% of the quota: %v", err)
	}
	err, refused := submitUntil(t, c, "refused", codes.ResourceExhausted, "")
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "near its space quota") || !strings.Contains(msg, "80% soft limit") ||
		!strings.Contains(msg, "running tasks continue") {
		t.Fatalf("refusal message %q does not say why", msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), spaceWait)
	defer cancel()
	if _, err := c.GetTask(ctx, &reevev1.GetTaskRequest{TaskId: refused}); status.Code(err) != codes.NotFound {
		t.Fatalf("refused task was recorded: %v", err)
	}

	// The running task goes on: a succeeds, b fails for good, a is undone.
	if ack := agent.Succeed(a.GetRef(), nil); !ack.GetAccepted() {
		t.Fatalf("result refused near the quota: %v", ack)
	}
	if ack := agent.Fail(agent.NextAssignment(spaceWait).GetRef(), &reevev1.StepError{Message: "no", NonRetryable: true}); !ack.GetAccepted() {
		t.Fatalf("failure refused near the quota: %v", ack)
	}
	undo := agent.NextAssignment(spaceWait)
	if undo.GetType() != "undo" {
		t.Fatalf("assignment %v, want the compensation", undo)
	}
	agent.Succeed(undo.GetRef(), nil)
	if final := testenv.WaitTask(t, c, "default", "running", spaceWait); final.GetState() != reevev1.TaskState_TASK_STATE_COMPENSATED {
		t.Fatalf("running task ended %v, want COMPENSATED", final.GetState())
	}

	free(t, cli)
	submitUntil(t, c, "after", codes.OK, "")
}

// At the quota itself etcd raises NOSPACE: submissions are refused with
// RESOURCE_EXHAUSTED naming the alarm; after an operator frees space and
// disarms it, they are accepted again.
func TestNoSpaceAlarmRefusesNewTasksUntilDisarmed(t *testing.T) {
	_, c, _, cli := spaceEnv(t)
	if err := fill(t, cli, 2); err == nil {
		t.Fatal("etcd accepted writes past its quota")
	}
	err, _ := submitUntil(t, c, "refused", codes.ResourceExhausted, "NOSPACE")
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "NOSPACE") || !strings.Contains(msg, "disarm") {
		t.Fatalf("refusal message %q does not name the alarm", msg)
	}
	free(t, cli)
	submitUntil(t, c, "after", codes.OK, "")
}

// Defect 11: after NOSPACE, the scheduler recovered only when an operator
// compacted, defragmented and disarmed etcd. Once the data that filled it
// is deleted (deletes work under NOSPACE), it reclaims the space, disarms
// the alarm and accepts tasks again by itself.
//
// New tasks are refused while etcd is full, naming the alarm or the soft
// limit: reclaiming every 2 s, the scheduler may already have disarmed
// NOSPACE if a defragmentation brought the file under 90% of the quota.
func TestNoSpaceRecoversByItselfOnceDataIsDeleted(t *testing.T) {
	env := testenv.New(t, etcdtest.WithQuotaBytes(testQuota))
	s := env.StartScheduler("", scheduler.WithSpaceCheckInterval(50*time.Millisecond), scheduler.WithSpaceReclaim(2*time.Second))
	c, cli := s.Client(t), env.Etcd.Client()
	if err := fill(t, cli, 2); err == nil {
		t.Fatal("etcd accepted writes past its quota")
	}
	submitUntil(t, c, "refused", codes.ResourceExhausted, "")
	ctx, cancel := context.WithTimeout(context.Background(), spaceWait)
	defer cancel()
	if _, err := cli.Delete(ctx, "/filler/", clientv3.WithPrefix()); err != nil {
		t.Fatalf("delete under NOSPACE: %v", err)
	}
	submitUntil(t, c, "after", codes.OK, "")
	alarms, err := cli.AlarmList(ctx)
	if err != nil || len(alarms.Alarms) != 0 {
		t.Fatalf("alarms after recovery: %v %v", alarms, err)
	}
}

// Defect 11: admission looked only at the space in use, so a flood was
// admitted up to the soft limit and draining it (claims, results, history)
// then filled etcd to NOSPACE. Space is reserved for every execution in
// flight: with 60% of the quota in use and 64 KiB reserved per ready or
// deadline key (a queued step has both), new tasks are refused after about
// (80%-60%) of 16 MiB / 128 KiB ≈ 25 of them, with a message naming the
// reserve, long before the space in use itself reaches the soft limit.
//
// The guard reads the space and counts the work in flight every 50ms, so
// how many submissions get in before a reading sees them depends on the
// machine's speed: the count is logged. What is checked is the reading the
// refusal reports: 64 KiB for each execution in flight, which together with
// the space in use reaches the soft limit while the space in use is far
// below it.
func TestAdmissionReservesSpaceForWorkInFlight(t *testing.T) {
	const reserve = 64 << 10
	env := testenv.New(t, etcdtest.WithQuotaBytes(testQuota))
	s := env.StartScheduler("", scheduler.WithSpaceCheckInterval(50*time.Millisecond), scheduler.WithSpaceReserve(reserve), scheduler.WithSpaceReclaim(0))
	c, cli := s.Client(t), env.Etcd.Client()
	if err := fill(t, cli, 0.6); err != nil {
		t.Fatal(err)
	}
	err, last := submitUntil(t, c, "queued", codes.ResourceExhausted, "reserved")
	msg := status.Convert(err).Message()
	m := regexp.MustCompile(`([0-9.]+) MiB of the ([0-9.]+) MiB quota in use .*plus ([0-9.]+) MiB reserved for the ([0-9]+) executions in flight`).FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("refusal %q does not give the space in use and the reserve for the work in flight", msg)
	}
	inUse, quota, reserved := mib(t, m[1]), mib(t, m[2]), mib(t, m[3])
	live, _ := strconv.Atoi(m[4])
	// The message gives MiB to one decimal: off by at most half a tenth
	// (1.75 MiB, 28 executions, prints as 1.8), plus float slop.
	const rounding = 0.05*(1<<20) + 1024
	if want := float64(live * reserve); math.Abs(reserved-want) > rounding {
		t.Errorf("%.0f bytes reserved for %d executions in flight, want %.0f (%d KiB each): %q", reserved, live, want, reserve>>10, msg)
	}
	if inUse+reserved < 0.8*quota-2*rounding {
		t.Errorf("refused with %.0f bytes in use and %.0f reserved, under the 80%% soft limit of %.0f: %q", inUse, reserved, quota, msg)
	}
	if f := inUse / quota; f >= 0.75 {
		t.Errorf("refused only at %.0f%% in use: the reserve did nothing (%q)", 100*f, msg)
	}
	t.Logf("refused at task %s with %.0f%% of the quota in use and %d executions in flight", last[strings.LastIndex(last, "-")+1:], 100*inUse/quota, live)
}

// mib parses a size the refusal gives in MiB, in bytes.
func mib(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("size %q: %v", s, err)
	}
	return f * (1 << 20)
}
