package console

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// listTasks returns one page of the tasks matching f. The API filters by
// state; the other filters are applied here over at most scanPages pages
// (scanned reports that), until the API filters them itself.
func (s *Server) listTasks(ctx context.Context, opts []grpc.CallOption, f taskFilter, size int, page string) (tasks []*reevev1.Task, next string, scanned bool, err error) {
	const scanPages = 5
	local := f.Workflow != "" || f.Prefix != "" || f.After != "" || f.Before != ""
	for range scanPages {
		resp, err := s.sched.ListTasks(ctx, f.request(size, page), opts...)
		if err != nil {
			return nil, "", local, err
		}
		for _, t := range resp.GetTasks() {
			if f.matches(t) {
				tasks = append(tasks, t)
			}
		}
		page = resp.GetNextPageToken()
		if !local || page == "" || len(tasks) >= size {
			break
		}
	}
	return tasks, page, local, nil
}

// counts returns the number of tasks per state for f's namespace, or nil
// when the API cannot count.
func (s *Server) counts(ctx context.Context, opts []grpc.CallOption, f taskFilter) []stateCount {
	return nil
}

// tasksEvents tells the tasks page to reload its rows when the first page
// of its filter changes (checked every pollEvery).
func (s *Server) tasksEvents(w http.ResponseWriter, r *http.Request, ss *session) {
	f, err := parseTaskFilter(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out := startSSE(w)
	pollChanges(r.Context(), out, func(ctx context.Context) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, s.callTimeout)
		defer cancel()
		tasks, _, _, err := s.listTasks(ctx, ss.callOpts(), f, f.Size, f.Page)
		if err != nil {
			return "", err
		}
		var b strings.Builder
		for _, t := range tasks {
			fmt.Fprintf(&b, "%s@%d;", t.GetId(), t.GetUpdateTime().AsTime().UnixNano())
		}
		return b.String(), nil
	})
}
