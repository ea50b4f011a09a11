package scheduler

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/workflow"
)

// listWait is how long a list waits for a free slot among the scheduler's
// concurrent lists (WithMaxConcurrentLists) before RESOURCE_EXHAUSTED.
const listWait = time.Second

// ListTasks implements SchedulerService.
func (svc *schedulerService) ListTasks(ctx context.Context, req *reevev1.ListTasksRequest) (*reevev1.ListTasksResponse, error) {
	q, view, err := taskQuery(req)
	if err != nil {
		return nil, statusErr(err)
	}
	release, err := svc.adm.acquireList(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	q.MaxBytes = svc.opts.listBytes
	// The basic view is decoded as such from etcd (store.TaskQuery.Basic);
	// Trim applies it to archived rows.
	q.Basic = view == reevev1.TaskView_TASK_VIEW_BASIC
	q.Trim = trimmer(view)
	page, archived, err := svc.tasks.List(ctx, q, view == reevev1.TaskView_TASK_VIEW_FULL)
	if err != nil {
		return nil, statusErr(err)
	}
	resp := &reevev1.ListTasksResponse{Tasks: page.Tasks, Revision: page.Revision, ArchivedTaskIds: archived}
	if page.Next != nil {
		resp.NextPageToken = encodeListToken(req, *page.Next)
	}
	return resp, nil
}

// taskQuery validates a ListTasksRequest and turns it into a store query.
func taskQuery(req *reevev1.ListTasksRequest) (store.TaskQuery, reevev1.TaskView, error) {
	var q store.TaskQuery
	if err := workflow.ValidateNamespace("namespace", req.GetNamespace()); err != nil {
		return q, 0, err
	}
	if _, ok := reevev1.TaskState_name[int32(req.GetState())]; !ok {
		return q, 0, &workflow.FieldError{Field: "state", Reason: fmt.Sprintf("unknown task state %d", req.GetState())}
	}
	view, err := taskView("view", req.GetView())
	if err != nil {
		return q, 0, err
	}
	if wf := req.GetWorkflow(); wf != "" {
		if err := workflow.ValidateName("workflow", wf); err != nil {
			return q, 0, err
		}
	}
	if err := workflow.ValidateLabels("labels", req.GetLabels()); err != nil {
		return q, 0, err
	}
	if p := req.GetTaskIdPrefix(); p != "" {
		// A prefix of a valid id is itself a valid id.
		if err := workflow.ValidateTaskID("task_id_prefix", p); err != nil {
			return q, 0, err
		}
	}
	for _, f := range []struct {
		name string
		ts   interface {
			CheckValid() error
			AsTime() time.Time
		}
		set bool
	}{
		{"created_after", req.GetCreatedAfter(), req.GetCreatedAfter() != nil},
		{"created_before", req.GetCreatedBefore(), req.GetCreatedBefore() != nil},
	} {
		if !f.set {
			continue
		}
		if err := f.ts.CheckValid(); err != nil {
			return q, 0, &workflow.FieldError{Field: f.name, Reason: err.Error()}
		}
		if f.ts.AsTime().Before(time.Unix(0, 0)) {
			return q, 0, &workflow.FieldError{Field: f.name, Reason: "before 1970"}
		}
	}
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return q, 0, err
	}
	q = store.TaskQuery{
		Namespace: workflow.Namespace(req.GetNamespace()),
		State:     req.GetState(),
		Workflow:  req.GetWorkflow(),
		IDPrefix:  req.GetTaskIdPrefix(),
		Labels:    req.GetLabels(),
		Limit:     size,
	}
	if req.GetCreatedAfter() != nil {
		q.CreatedAfter = req.GetCreatedAfter().AsTime()
	}
	if req.GetCreatedBefore() != nil {
		q.CreatedBefore = req.GetCreatedBefore().AsTime()
	}
	if tok := req.GetPageToken(); tok != "" {
		pos, err := decodeListToken(req, tok)
		if err != nil {
			return q, 0, err
		}
		q.After = &pos
	}
	return q, view, nil
}

func taskView(field string, v reevev1.TaskView) (reevev1.TaskView, error) {
	switch v {
	case reevev1.TaskView_TASK_VIEW_UNSPECIFIED, reevev1.TaskView_TASK_VIEW_BASIC:
		return reevev1.TaskView_TASK_VIEW_BASIC, nil
	case reevev1.TaskView_TASK_VIEW_FULL:
		return v, nil
	}
	return 0, &workflow.FieldError{Field: field, Reason: fmt.Sprintf("unknown task view %d", v)}
}

// trimmer returns what a view leaves out of a task, nil for the full view.
func trimmer(view reevev1.TaskView) func(*reevev1.Task) {
	if view == reevev1.TaskView_TASK_VIEW_FULL {
		return nil
	}
	return basicView
}

// basicView drops what makes a task large: its input, history and step
// outputs, and of its workflow snapshot everything but the name and
// version. It changes t in place. store.TaskQuery.Basic decodes records
// to the same (internal/store/basic.go); keep the two alike.
func basicView(t *reevev1.Task) {
	t.Input = nil
	t.History = nil
	if wf := t.GetWorkflow(); wf != nil {
		t.Workflow = &reevev1.Workflow{Namespace: wf.GetNamespace(), Name: wf.GetName(), Version: wf.GetVersion()}
	}
	for _, st := range t.GetSteps() {
		st.Output = nil
	}
}

// A ListTasks page token (pagetoken.go) holds where the previous page
// ended (create time in unix ns, task id) and a fingerprint of the filters
// it was issued for.
func listFilters(req *reevev1.ListTasksRequest) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%d\x00%s\x00%s\x00%v\x00%v", workflow.Namespace(req.GetNamespace()), req.GetState(),
		req.GetWorkflow(), req.GetTaskIdPrefix(), req.GetCreatedAfter().AsTime().UnixNano(), req.GetCreatedBefore().AsTime().UnixNano())
	for _, k := range slices.Sorted(maps.Keys(req.GetLabels())) {
		fmt.Fprintf(h, "\x00%s=%s", k, req.GetLabels()[k])
	}
	return strconv.FormatUint(h.Sum64(), 16)
}

func encodeListToken(req *reevev1.ListTasksRequest, p store.ListPosition) string {
	return encodePageToken(pageTasks, listFilters(req), strconv.FormatInt(p.Created.UnixNano(), 10), p.ID)
}

func decodeListToken(req *reevev1.ListTasksRequest, tok string) (store.ListPosition, error) {
	f, err := decodePageToken(tok, pageTasks, listFilters(req), 2)
	if err != nil {
		return store.ListPosition{}, err
	}
	nanos, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || nanos < 0 || workflow.ValidateTaskID("page_token", f[1]) != nil {
		return store.ListPosition{}, &workflow.FieldError{Field: "page_token", Reason: "not a page token; pass the next_page_token of a previous response with the same filters, unchanged"}
	}
	return store.ListPosition{Created: time.Unix(0, nanos), ID: f[1]}, nil
}

// CountTasks implements SchedulerService.
func (svc *schedulerService) CountTasks(ctx context.Context, req *reevev1.CountTasksRequest) (*reevev1.CountTasksResponse, error) {
	if err := workflow.ValidateNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, statusErr(err)
	}
	if wf := req.GetWorkflow(); wf != "" {
		if err := workflow.ValidateName("workflow", wf); err != nil {
			return nil, statusErr(err)
		}
	}
	if err := workflow.ValidateLabels("labels", req.GetLabels()); err != nil {
		return nil, statusErr(err)
	}
	ns := workflow.Namespace(req.GetNamespace())
	// A task moving to the archive is counted twice for that moment.
	var counts map[reevev1.TaskState]int64
	var rev int64
	var err error
	if len(req.GetLabels()) > 0 {
		counts, rev, err = svc.tasks.CountLabeled(ctx, ns, req.GetWorkflow(), req.GetLabels())
	} else {
		counts, rev, err = svc.tasks.Count(ctx, ns, req.GetWorkflow())
	}
	if err != nil {
		return nil, statusErr(err)
	}
	resp := &reevev1.CountTasksResponse{ByState: make(map[string]int64, len(counts)), Revision: rev}
	if len(req.GetLabels()) == 0 {
		n, err := svc.store.CountStarting(ctx, ns, req.GetWorkflow(), rev)
		if err != nil {
			return nil, statusErr(err)
		}
		resp.WaitingToStart = wrapperspb.Int64(n)
	}
	for _, st := range slices.Sorted(maps.Keys(counts)) {
		n := counts[st]
		resp.Counts = append(resp.Counts, &reevev1.StateCount{State: st, Count: n})
		resp.ByState[st.String()] = n // deprecated; removed in the next release
	}
	return resp, nil
}

// watchBuffer is how many task changes a WatchTasks stream holds for a
// client that reads slower than tasks change (and WithWatchBufferBytes how
// many bytes); past either the stream ends with RESOURCE_EXHAUSTED and the
// client resumes from its last revision.
const watchBuffer = 1024

// errSlowWatcher ends a WatchTasks stream whose client fell behind.
var errSlowWatcher = errors.New("watch: client too slow")

// WatchTasks implements SchedulerService. A reading goroutine follows etcd
// and fills a bounded buffer; this goroutine alone sends.
func (svc *schedulerService) WatchTasks(req *reevev1.WatchTasksRequest, stream reevev1.SchedulerService_WatchTasksServer) error {
	if err := workflow.ValidateNamespace("namespace", req.GetNamespace()); err != nil {
		return statusErr(err)
	}
	if req.GetStartRevision() < 0 {
		return statusErr(&workflow.FieldError{Field: "start_revision", Reason: "must not be negative"})
	}
	view, err := taskView("view", req.GetView())
	if err != nil {
		return statusErr(err)
	}
	trim := trimmer(view)
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	type change struct {
		m    *reevev1.WatchTasksResponse
		size int64 // encoded
	}
	events := make(chan change, watchBuffer)
	watchErr := make(chan error, 1)
	var (
		sent int64 // revision of the last change sent
		// buffered is the size of the changes taken from etcd and not
		// yet sent, the one being sent included.
		buffered atomic.Int64
	)
	go func() {
		defer close(events)
		watchErr <- svc.store.WatchTasks(ctx, workflow.Namespace(req.GetNamespace()), req.GetStartRevision(), view == reevev1.TaskView_TASK_VIEW_BASIC, func(ev store.TaskEvent) error {
			var m *reevev1.WatchTasksResponse
			if ev.Task == nil {
				m = &reevev1.WatchTasksResponse{Event: &reevev1.WatchTasksResponse_Reset_{Reset_: &reevev1.WatchReset{Revision: ev.Revision}}}
			} else {
				if trim != nil && !ev.Deleted {
					trim(ev.Task)
				}
				m = &reevev1.WatchTasksResponse{Event: &reevev1.WatchTasksResponse_Changed{Changed: &reevev1.TaskChanged{Task: ev.Task, Deleted: ev.Deleted, Archived: ev.Deleted && svc.opts.archive != nil, Revision: ev.Revision}}}
			}
			// A change larger than the budget is still sent when it is
			// the only one held.
			size := int64(proto.Size(m))
			b := buffered.Add(size)
			if b > size && b > svc.opts.watchBytes {
				return errSlowWatcher
			}
			select {
			case events <- change{m, size}:
				return nil
			default:
				return errSlowWatcher
			}
		})
	}()
	for ev := range events {
		m := ev.m
		if err := stream.Send(m); err != nil {
			return err
		}
		buffered.Add(-ev.size)
		if c := m.GetChanged(); c != nil {
			sent = c.GetRevision()
		} else {
			sent = m.GetReset_().GetRevision()
		}
	}
	err = <-watchErr
	switch {
	case errors.Is(err, errSlowWatcher):
		return statusErr(refuse(codes.ResourceExhausted, ReasonSlowReader, "start_revision: the client read changes slower than they happened (%d changes or %d bytes buffered); watch again from revision %d", watchBuffer, svc.opts.watchBytes, sent))
	case stream.Context().Err() != nil:
		return nil
	}
	return statusErr(err)
}
