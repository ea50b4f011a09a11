package scheduler

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/telemetry"
)

// instruments are the scheduler's spans and metrics (docs/observability.md).
type instruments struct {
	tracer    trace.Tracer
	submitted metric.Int64Counter
	ended     map[reevev1.TaskState]metric.Int64Counter
	queueWait metric.Float64Histogram
	runTime   metric.Float64Histogram
	attrs     attrSets
	// unknownMessages counts agent messages of a kind not known here.
	unknownMessages metric.Int64Counter
	// The archive's writes (archive.go).
	archivedTasks  metric.Int64Counter
	archiveErrors  metric.Int64Counter
	archiveLatency metric.Float64Histogram
	// Submissions with a chosen id answered without the archive, while it
	// was unavailable (dedup.go): by the outcome, created or refused.
	archiveWindowAnswers metric.Int64Counter
	// Waits for completions from outside (completion_telemetry.go).
	waits *waitInstruments

	mu         sync.Mutex
	namespaces map[string]bool // namespaces whose task counts are reported
}

var durationBuckets = metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)

func newInstruments(s *Server) *instruments {
	m := s.opts.meter.Meter(telemetry.ScopeName + "/scheduler")
	in := &instruments{
		tracer:     s.opts.tracer.Tracer(telemetry.ScopeName + "/scheduler"),
		ended:      map[reevev1.TaskState]metric.Int64Counter{},
		namespaces: map[string]bool{"default": true},
	}
	in.waits = newWaitInstruments(m, in, s.store)
	in.unknownMessages, _ = m.Int64Counter("reeve.agent.unknown_messages",
		metric.WithDescription("Agent messages of a kind this scheduler does not know (from a newer protocol), ignored"))
	in.archivedTasks, _ = m.Int64Counter("reeve.archive.tasks",
		metric.WithDescription("Finished tasks written to the archive (then deleted from etcd unless they changed meanwhile)"))
	in.archiveErrors, _ = m.Int64Counter("reeve.archive.errors",
		metric.WithDescription("Archive writes that failed; their tasks stay in etcd until a later write"))
	in.archiveLatency, _ = m.Float64Histogram("reeve.archive.write_time", metric.WithUnit("s"), durationBuckets,
		metric.WithDescription("Time of one archive write (a batch of up to 500 tasks) until durable"))
	in.archiveWindowAnswers, _ = m.Int64Counter("reeve.archive.dedup_window_answers",
		metric.WithDescription("Submissions with a chosen task id checked against the deduplication window because the archive was unavailable; outcome created (no task with that id moved within the window) or refused (one did, or the window could not be read)"))
	if s.opts.archive != nil {
		s.mover.caughtUp.Store(s.opts.clock.Now().UnixNano())
		_, _ = m.Float64ObservableGauge("reeve.archive.lag", metric.WithUnit("s"),
			metric.WithDescription("How far the archive's moves are behind: now − grace − the cutoff of the last archive pass that moved every task due; grows while the archive is down or slow"),
			metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error {
				due := s.opts.clock.Now().Add(-s.opts.archiveGrace)
				o.Observe(max(0, due.Sub(time.Unix(0, s.mover.caughtUp.Load())).Seconds()))
				return nil
			}))
	}
	in.submitted, _ = m.Int64Counter("reeve.tasks.submitted", metric.WithDescription("Tasks created by SubmitTask (idempotent resubmissions not counted)"))
	for st, name := range map[reevev1.TaskState]string{
		reevev1.TaskState_TASK_STATE_SUCCEEDED:   "reeve.tasks.completed",
		reevev1.TaskState_TASK_STATE_FAILED:      "reeve.tasks.failed",
		reevev1.TaskState_TASK_STATE_COMPENSATED: "reeve.tasks.compensated",
		reevev1.TaskState_TASK_STATE_CANCELED:    "reeve.tasks.canceled",
	} {
		in.ended[st], _ = m.Int64Counter(name, metric.WithDescription("Tasks that ended "+st.String()))
	}
	in.queueWait, _ = m.Float64Histogram("reeve.step.queue_wait", metric.WithUnit("s"), durationBuckets,
		metric.WithDescription("Time from an attempt being due (ready, backoff over) to its claim for an agent"))
	in.runTime, _ = m.Float64Histogram("reeve.step.run_time", metric.WithUnit("s"), durationBuckets,
		metric.WithDescription("Time from an attempt's dispatch to its recorded result"))

	inFlight, _ := m.Int64ObservableGauge("reeve.steps.in_flight",
		metric.WithDescription("Attempts dispatched by this scheduler and not yet reported (sum over schedulers)"))
	agents, _ := m.Int64ObservableGauge("reeve.agents.connected",
		metric.WithDescription("Agent streams connected to this scheduler, by step type (sum over schedulers)"))
	tasks, _ := m.Int64ObservableGauge("reeve.tasks",
		metric.WithDescription("Tasks in a non-terminal state, read from etcd's state index (every scheduler reports the same value)"))
	queued, _ := m.Int64ObservableGauge("reeve.steps.queued",
		metric.WithDescription("Steps due and waiting for an agent, by namespace and step type, from this scheduler's view of the ready queue (every scheduler sees the whole queue: aggregate with max)"))
	queuedAge, _ := m.Float64ObservableGauge("reeve.steps.queued.oldest_age", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest step waiting for an agent has waited, by namespace and step type, since it became due or this scheduler learned of it (aggregate with max)"))
	dbSize, _ := m.Int64ObservableGauge("reeve.etcd.db.size", metric.WithUnit("By"),
		metric.WithDescription("Size of etcd's database file (its high-water mark), of the fullest member"))
	dbInUse, _ := m.Int64ObservableGauge("reeve.etcd.db.size_in_use", metric.WithUnit("By"),
		metric.WithDescription("Part of etcd's database in use (what compaction and retention shrink), of the fullest member"))
	dbQuota, _ := m.Int64ObservableGauge("reeve.etcd.db.quota", metric.WithUnit("By"),
		metric.WithDescription("etcd's backend quota: at it etcd refuses writes (NOSPACE)"))
	_, _ = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		running, byType := s.disp.load()
		o.ObserveInt64(inFlight, int64(running))
		for k, n := range byType {
			o.ObserveInt64(agents, int64(n), metric.WithAttributes(telemetry.KeyNamespace.String(k.ns), telemetry.KeyStepType.String(k.typ)))
		}
		for k, q := range s.disp.queueStats() {
			attrs := metric.WithAttributes(telemetry.KeyNamespace.String(k.ns), telemetry.KeyStepType.String(k.typ))
			o.ObserveInt64(queued, int64(q.n), attrs)
			o.ObserveFloat64(queuedAge, q.oldest.Seconds(), attrs)
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		// The space guard's last reading when it runs, else one status
		// request per member.
		sp := s.adm.space.last.Load()
		if sp == nil {
			if fresh, err := s.store.Space(cctx); err == nil {
				sp = &spaceReading{Space: fresh}
			}
		}
		if sp != nil {
			o.ObserveInt64(dbSize, sp.Size)
			o.ObserveInt64(dbInUse, sp.InUse)
			o.ObserveInt64(dbQuota, sp.Quota)
		}
		for _, ns := range in.knownNamespaces() {
			for _, st := range activeStates {
				n, err := s.store.CountTasks(cctx, ns, st)
				if err != nil {
					return nil // etcd unavailable: no sample rather than a wrong one
				}
				o.ObserveInt64(tasks, n, metric.WithAttributes(telemetry.KeyNamespace.String(ns), telemetry.KeyTaskState.String(st.String())))
			}
		}
		return nil
	}, inFlight, agents, tasks, queued, queuedAge, dbSize, dbInUse, dbQuota)
	return in
}

// activeStates are the task states reported by the reeve.tasks gauge; the
// terminal ones are counters (their index grows with retention).
var activeStates = []reevev1.TaskState{
	reevev1.TaskState_TASK_STATE_PENDING, reevev1.TaskState_TASK_STATE_RUNNING, reevev1.TaskState_TASK_STATE_COMPENSATING,
}

func (in *instruments) seeNamespace(ns string) {
	in.mu.Lock()
	in.namespaces[ns] = true
	in.mu.Unlock()
}

func (in *instruments) knownNamespaces() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Collect(maps.Keys(in.namespaces))
}

// submittedOne counts a task created in namespace ns.
func (in *instruments) submittedOne(ctx context.Context, ns string) {
	in.submitted.Add(ctx, 1, in.attrs.get([5]string{"submitted", ns}, func() []attribute.KeyValue {
		return []attribute.KeyValue{telemetry.KeyNamespace.String(ns)}
	}))
}

// startSubmit starts the span whose context the task record keeps: every
// later span of the task is in its trace.
func (in *instruments) startSubmit(ctx context.Context, req *reevev1.SubmitTaskRequest) (context.Context, trace.Span) {
	in.seeNamespace(req.GetNamespace())
	return in.tracer.Start(ctx, telemetry.SpanSubmit, trace.WithAttributes(
		telemetry.KeyNamespace.String(req.GetNamespace()), telemetry.KeyTaskID.String(req.GetTaskId())))
}

// taskContext is the context of the task's trace, restored from its record.
func taskContext(rec *storev1.TaskRecord) context.Context {
	return telemetry.Extract(context.Background(), rec.GetTraceContext())
}

func stepAttrs(t *reevev1.Task, st *reevev1.Step) []attribute.KeyValue {
	return []attribute.KeyValue{
		telemetry.KeyNamespace.String(t.GetNamespace()), telemetry.KeyTaskID.String(t.GetId()),
		telemetry.KeyWorkflow.String(t.GetWorkflow().GetName()),
		telemetry.KeyStep.String(st.GetName()), telemetry.KeyStepType.String(taskstate.ExecutionType(t, st)),
		telemetry.KeyAttempt.Int(int(st.GetAttempt())), telemetry.KeyCompensation.Bool(taskstate.Compensating(st)),
	}
}

// claimed records the attempt span of a claimed execution (from when it was
// due to its claim: the queue wait), linked to the step's previous attempt,
// and puts its context in the assignment for the agent's span.
func (in *instruments) claimed(rec *storev1.TaskRecord, st *reevev1.Step, a *reevev1.StepAssignment, schedulerID, agentID string, now time.Time) {
	t := rec.GetTask()
	due := dueAt(st, now)
	wait := now.Sub(due)
	ns, typ, comp := t.GetNamespace(), taskstate.ExecutionType(t, st), taskstate.Compensating(st)
	in.queueWait.Record(context.Background(), wait.Seconds(), in.attrs.get([5]string{"queue_wait", ns, typ, boolKey(comp)}, func() []attribute.KeyValue {
		return []attribute.KeyValue{telemetry.KeyNamespace.String(ns), telemetry.KeyStepType.String(typ), telemetry.KeyCompensation.Bool(comp)}
	}))

	ctx := taskContext(rec)
	task := trace.SpanContextFromContext(ctx)
	if !task.IsValid() {
		return
	}
	attrs := stepAttrs(t, st)
	self := telemetry.AttemptSpanContext(task, t.GetNamespace(), t.GetId(), st.GetName(), st.GetAttempt())
	opts := []trace.SpanStartOption{
		trace.WithTimestamp(due),
		trace.WithAttributes(attrs...),
		trace.WithAttributes(telemetry.KeyAgentID.String(agentID), telemetry.KeySchedulerID.String(schedulerID), telemetry.KeyQueueWait.Int64(wait.Milliseconds())),
	}
	if st.GetAttempt() > 1 {
		prev := telemetry.AttemptSpanContext(task, t.GetNamespace(), t.GetId(), st.GetName(), st.GetAttempt()-1)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: prev, Attributes: []attribute.KeyValue{attribute.String("reeve.link", "previous_attempt")}}))
	}
	ctx, span := in.tracer.Start(telemetry.WithSpanID(ctx, self.SpanID()), telemetry.SpanAttempt, opts...)
	span.AddEvent("claimed", trace.WithTimestamp(now))
	a.TraceContext = telemetry.Inject(ctx)
	span.End(trace.WithTimestamp(now))
}

// resulted records how a result changed the task: a span under the
// attempt's span, the attempt's run time and the task's end.
func (in *instruments) resulted(before, after *storev1.TaskRecord, ref *reevev1.StepRef, res *reevev1.StepResult, agentID string, now time.Time) {
	bt, at := before.GetTask(), after.GetTask()
	st, bst := taskstate.FindStep(at, ref.GetStep()), taskstate.FindStep(bt, ref.GetStep())
	if dispatched, ok := dispatchTime(bt, ref); ok {
		ns, typ, comp, outcome := bt.GetNamespace(), taskstate.ExecutionType(bt, bst), taskstate.Compensating(bst), outcomeOf(res)
		in.runTime.Record(context.Background(), now.Sub(dispatched).Seconds(), in.attrs.get([5]string{"run_time", ns, typ, boolKey(comp), outcome}, func() []attribute.KeyValue {
			return []attribute.KeyValue{telemetry.KeyNamespace.String(ns), telemetry.KeyStepType.String(typ), telemetry.KeyCompensation.Bool(comp), telemetry.KeyOutcome.String(outcome)}
		}))
	}
	in.ended1(bt, at)

	task := trace.SpanContextFromContext(taskContext(after))
	if !task.IsValid() {
		return
	}
	attrs := stepAttrs(bt, bst)
	parent := telemetry.AttemptSpanContext(task, ref.GetNamespace(), ref.GetTaskId(), ref.GetStep(), ref.GetAttempt())
	_, span := in.tracer.Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), telemetry.SpanResult,
		trace.WithTimestamp(now), trace.WithAttributes(attrs...),
		trace.WithAttributes(telemetry.KeyAgentID.String(agentID), telemetry.KeyOutcome.String(decisionOf(bt, at, st, ref)),
			telemetry.KeyTaskState.String(at.GetState().String())))
	if e := res.GetError(); e != nil {
		span.SetAttributes(telemetry.KeyErrorCode.String(e.GetCode()))
		span.SetStatus(codes.Error, e.GetMessage())
	}
	if d := retryDelay(st); st.GetAttempt() > ref.GetAttempt() && d > 0 {
		span.SetAttributes(telemetry.KeyDelay.Int64(d.Milliseconds()))
	}
	span.End(trace.WithTimestamp(now))
}

// ended1 counts a task that this change ended.
func (in *instruments) ended1(before, after *reevev1.Task) {
	if before == nil || after == nil || taskstate.TerminalTask(before.GetState()) || !taskstate.TerminalTask(after.GetState()) {
		return
	}
	if c := in.ended[after.GetState()]; c != nil {
		ns, wf := after.GetNamespace(), workflowLabel(after)
		c.Add(context.Background(), 1, in.attrs.get([5]string{"ended", ns, wf}, func() []attribute.KeyValue {
			return []attribute.KeyValue{telemetry.KeyNamespace.String(ns), telemetry.KeyWorkflow.String(wf)}
		}))
	}
}

// workflowLabel is the task's workflow name as a metric attribute:
// "(inline)" for a workflow submitted with the task. Names are bounded by
// the registered workflows.
func workflowLabel(t *reevev1.Task) string {
	if n := t.GetWorkflow().GetName(); n != "" {
		return n
	}
	return "(inline)"
}

func outcomeOf(res *reevev1.StepResult) string {
	if res.GetError() != nil {
		return "failed"
	}
	if res.GetDeferred() != nil {
		return "deferred"
	}
	return "succeeded"
}

// decisionOf names what a result led to: succeeded, retry or backoff (a
// new attempt is queued, now or later), compensate (the task compensates),
// fail (the task failed) or failed (the step failed, the task goes on).
func decisionOf(before, after *reevev1.Task, st *reevev1.Step, ref *reevev1.StepRef) string {
	switch {
	case st.GetAttempt() > ref.GetAttempt():
		if retryDelay(st) > 0 {
			return "backoff"
		}
		return "retry"
	case st.GetState() == reevev1.StepState_STEP_STATE_SUCCEEDED || st.GetState() == reevev1.StepState_STEP_STATE_COMPENSATED:
		return "succeeded"
	case after.GetState() == reevev1.TaskState_TASK_STATE_COMPENSATING && before.GetState() != after.GetState():
		return "compensate"
	case after.GetState() == reevev1.TaskState_TASK_STATE_FAILED:
		return "fail"
	}
	return "failed"
}

// retryDelay is the backoff a queued step waits before its next attempt:
// from when it became ready to its not-before.
func retryDelay(st *reevev1.Step) time.Duration {
	if st.GetNotBefore() == nil || st.GetReadyTime() == nil {
		return 0
	}
	return st.GetNotBefore().AsTime().Sub(st.GetReadyTime().AsTime())
}

// dispatchTime finds when the attempt ref was dispatched, in the task's
// history (bounded by taskstate.MaxHistory).
func dispatchTime(t *reevev1.Task, ref *reevev1.StepRef) (time.Time, bool) {
	h := t.GetHistory()
	for i := len(h) - 1; i >= 0; i-- {
		e := h[i]
		if e.GetStep() == ref.GetStep() && e.GetAttempt() == ref.GetAttempt() &&
			(e.GetKind() == "step.dispatched" || e.GetKind() == "compensation.dispatched") {
			return e.GetTime().AsTime(), true
		}
	}
	return time.Time{}, false
}

// maxAttrSets bounds the memoized attribute sets; past it, sets are built
// per measurement as before.
const maxAttrSets = 4096

// attrSets memoizes the attribute sets of the scheduler's per-task
// measurements. metric.WithAttributes copies, sorts and deduplicates its
// attributes into a new set on every call (several allocations per task
// for each counter and histogram), while the sets repeat: they are keyed
// by namespace, step type, workflow and outcome. The key's first element
// names the measurement.
type attrSets struct {
	mu sync.Mutex
	m  map[[5]string]metric.MeasurementOption
}

func (c *attrSets) get(key [5]string, attrs func() []attribute.KeyValue) metric.MeasurementOption {
	c.mu.Lock()
	o, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return o
	}
	o = metric.WithAttributeSet(attribute.NewSet(attrs()...))
	c.mu.Lock()
	if c.m == nil {
		c.m = map[[5]string]metric.MeasurementOption{}
	}
	if len(c.m) < maxAttrSets {
		c.m[key] = o
	}
	c.mu.Unlock()
	return o
}

func boolKey(b bool) string { return strconv.FormatBool(b) }

// archived records one archive write of n tasks.
// windowAnswer counts a submission answered by the deduplication window.
func (in *instruments) windowAnswer(ctx context.Context, created bool) {
	outcome := "refused"
	if created {
		outcome = "created"
	}
	in.archiveWindowAnswers.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
}

func (in *instruments) archived(ctx context.Context, n int, took time.Duration, err error) {
	if err != nil {
		in.archiveErrors.Add(ctx, 1)
		return
	}
	in.archivedTasks.Add(ctx, int64(n))
	in.archiveLatency.Record(ctx, took.Seconds())
}
