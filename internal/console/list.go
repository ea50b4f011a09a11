package console

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// listCalls bounds the ListTasks calls that fill one page: the API may end
// a page early (byte and scan budgets) and still carry a next token.
const listCalls = 5

// taskPage is a page of the tasks list.
type taskPage struct {
	Tasks []*reevev1.Task
	// Next is the token of the page after it; empty at the end.
	Next string
	// Revision is the etcd revision of the first call (WatchTasks resumes
	// after it).
	Revision int64
	// Archived holds the ids of the tasks read from the archive of
	// finished tasks: read-only.
	Archived map[string]bool
}

// listTasks returns up to size tasks matching f, newest first, from page
// on; the API applies every filter from its indexes.
func (s *Server) listTasks(ctx context.Context, opts []grpc.CallOption, f taskFilter, size int, page string) (taskPage, error) {
	var p taskPage
	for i := 0; i < listCalls; i++ {
		req := &reevev1.ListTasksRequest{Namespace: f.NS, State: f.state, PageSize: int32(size - len(p.Tasks)), PageToken: page,
			Workflow: f.Workflow, TaskIdPrefix: f.Prefix, Labels: f.labels, CreatedAfter: timeOf(f.after), CreatedBefore: timeOf(f.before), View: reevev1.TaskView_TASK_VIEW_BASIC}
		resp, err := s.sched.ListTasks(ctx, req, opts...)
		if err != nil {
			return taskPage{}, err
		}
		if i == 0 {
			p.Revision = resp.GetRevision()
		}
		p.Tasks = append(p.Tasks, resp.GetTasks()...)
		for _, id := range resp.GetArchivedTaskIds() {
			if p.Archived == nil {
				p.Archived = map[string]bool{}
			}
			p.Archived[id] = true
		}
		page = resp.GetNextPageToken()
		if page == "" || len(p.Tasks) >= size {
			break
		}
	}
	p.Next = page
	return p, nil
}

// counts returns the number of tasks per state for f's namespace (and
// workflow), or nil when the API cannot count.
func (s *Server) counts(ctx context.Context, opts []grpc.CallOption, f taskFilter) []stateCount {
	resp, err := s.sched.CountTasks(ctx, &reevev1.CountTasksRequest{Namespace: f.NS, Workflow: f.Workflow, Labels: f.labels}, opts...)
	if err != nil {
		if status.Code(err) != codes.Unimplemented {
			s.log.DebugContext(ctx, "console: count tasks", "err", err)
		}
		return nil
	}
	by := map[string]int64{}
	for _, c := range resp.GetCounts() {
		by[c.GetState().String()] = c.GetCount()
	}
	var out []stateCount
	for _, st := range taskStates {
		out = append(out, stateCount{State: st, N: by["TASK_STATE_"+strings.ToUpper(st)]})
	}
	return out
}

// tasksEvents tells the tasks page to reload its rows ("changed") when a
// task of its namespace changes, fed by the API's WatchTasks from the
// revision the page was rendered at (the rev parameter, or Last-Event-ID
// on a reconnect: every event's id is its revision). After a compaction
// the API resets the watch; the page reloads too. When the API has no
// WatchTasks, the first page of the filter is polled every pollEvery.
func (s *Server) tasksEvents(w http.ResponseWriter, r *http.Request, ss *session) {
	f, err := parseTaskFilter(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rev, _ := strconv.ParseInt(r.URL.Query().Get("rev"), 10, 64)
	if id, err := strconv.ParseInt(r.Header.Get("Last-Event-ID"), 10, 64); err == nil && id > rev {
		rev = id
	}
	ctx := r.Context()
	out := startSSE(w)
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for ctx.Err() == nil {
		next, err := s.watchTasks(ctx, ss, f, rev, out, tick)
		rev = max(rev, next)
		if ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Unimplemented {
			s.pollTasks(ctx, ss, f, r.URL.Query().Get("fp"), out)
			return
		}
		s.log.DebugContext(ctx, "console: task watch broke", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pollEvery):
		}
	}
}

// watchTasks forwards one WatchTasks stream as "changed" events, at most
// one per second (a burst of changes is one reload); it returns the last
// revision sent.
func (s *Server) watchTasks(ctx context.Context, ss *session, f taskFilter, rev int64, out *sse, tick *time.Ticker) (int64, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.sched.WatchTasks(wctx, &reevev1.WatchTasksRequest{Namespace: f.NS, StartRevision: rev, View: reevev1.TaskView_TASK_VIEW_BASIC}, ss.callOpts()...)
	if err != nil {
		return rev, err
	}
	type msg struct {
		rev int64
		err error
	}
	ch := make(chan msg, 64)
	go func() {
		for {
			resp, err := stream.Recv()
			var m msg
			switch {
			case err != nil:
				m.err = err
			case resp.GetReset_() != nil:
				m.rev = resp.GetReset_().GetRevision()
			default:
				m.rev = resp.GetChanged().GetRevision()
			}
			select {
			case ch <- m:
			case <-wctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var pending int64 // a change not yet sent
	flush := time.NewTicker(time.Second)
	defer flush.Stop()
	for {
		select {
		case <-ctx.Done():
			return rev, ctx.Err()
		case <-tick.C:
			if err := out.comment("heartbeat"); err != nil {
				return rev, err
			}
		case <-flush.C:
			if pending > 0 {
				if err := out.send("changed", strconv.FormatInt(pending, 10), ""); err != nil {
					return rev, err
				}
				rev, pending = pending, 0
			}
		case m := <-ch:
			if m.err != nil {
				return rev, m.err
			}
			pending = max(pending, m.rev)
		}
	}
}

// pollTasks is the fallback of tasksEvents: it sends "changed" whenever the
// first page of the filter differs from the one the page showed (fp).
func (s *Server) pollTasks(ctx context.Context, ss *session, f taskFilter, fp string, out *sse) {
	pollChanges(ctx, out, fp, func(ctx context.Context) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, s.callTimeout)
		defer cancel()
		p, err := s.listTasks(ctx, ss.callOpts(), f, f.Size, f.Page)
		if err != nil {
			return "", err
		}
		return fingerprint(p.Tasks), nil
	})
}

// fingerprint names a list of tasks at their current versions.
func fingerprint(tasks []*reevev1.Task) string {
	h := fnv.New64a()
	for _, t := range tasks {
		fmt.Fprintf(h, "%s@%d;", t.GetId(), t.GetUpdateTime().AsTime().UnixNano())
	}
	return strconv.FormatUint(h.Sum64(), 36)
}
