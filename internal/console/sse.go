package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
)

const (
	// heartbeat is how often an idle event stream sends a comment, so that
	// proxies keep it open and a dead client is noticed.
	heartbeat = 15 * time.Second
	// pollEvery is how often a stream without a watch behind it looks for
	// changes.
	pollEvery = 2 * time.Second
	// retryMillis tells the browser how soon to reconnect a broken stream.
	retryMillis = 2000
)

// sse writes one Server-Sent-Events stream.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w)}
	_, _ = fmt.Fprintf(w, "retry: %d\n\n", retryMillis)
	_ = s.rc.Flush()
	return s
}

// send writes one event; data may span lines.
func (s *sse) send(event, id, data string) error {
	var b bytes.Buffer
	if id != "" {
		fmt.Fprintf(&b, "id: %s\n", id)
	}
	fmt.Fprintf(&b, "event: %s\n", event)
	for _, line := range strings.Split(data, "\n") {
		fmt.Fprintf(&b, "data: %s\n", strings.TrimRight(line, "\r"))
	}
	b.WriteString("\n")
	if _, err := s.w.Write(b.Bytes()); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *sse) comment(text string) error {
	if _, err := fmt.Fprintf(s.w, ": %s\n\n", text); err != nil {
		return err
	}
	return s.rc.Flush()
}

// taskEvents streams the task page's body on every change of the task, fed
// by the API's WatchTask. Each event carries the task's update time as its
// id. After the task ends the stream stays open with heartbeats only (so
// the browser does not reconnect in a loop); a broken watch is reopened.
func (s *Server) taskEvents(w http.ResponseWriter, r *http.Request, ss *session) {
	h, err := parseHistoryFilter(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	t, archived, ok := s.getTask(w, r, ss)
	if !ok {
		return
	}
	ctx := r.Context()
	out := startSSE(w)
	// The page was rendered at version v: send only newer ones.
	last := r.URL.Query().Get("v")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		last = id
	}
	push := func(t *reevev1.Task) error {
		id := sseID(t)
		if id == last {
			return nil
		}
		last = id
		var buf bytes.Buffer
		// Only a task that ended can be archived, and it is pushed once
		// (the watch follows tasks that have not ended).
		if err := s.tmpl.ExecuteTemplate(&buf, "task-body", s.taskData(r, ss, t, archived, h)); err != nil {
			return err
		}
		return out.send("task", id, buf.String())
	}
	if err := push(t); err != nil {
		return
	}
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for !taskstate.TerminalTask(t.GetState()) && ctx.Err() == nil {
		stream, err := s.sched.WatchTask(ctx, &reevev1.WatchTaskRequest{Namespace: t.GetNamespace(), TaskId: t.GetId()}, ss.callOpts()...)
		if err == nil {
			t, err = s.pumpWatch(ctx, stream, t, push, out, tick)
		}
		if err != nil && ctx.Err() == nil {
			s.log.DebugContext(ctx, "console: task watch broke", "task_id", t.GetId(), "err", err)
			if c := status.Code(err); c == codes.NotFound || c == codes.PermissionDenied || c == codes.Unauthenticated {
				_ = out.send("gone", "", status.Convert(err).Message())
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(pollEvery):
			}
		}
	}
	idle(ctx, out, tick)
}

// pumpWatch forwards a WatchTask stream until it ends; it returns the last
// task seen.
func (s *Server) pumpWatch(ctx context.Context, stream reevev1.SchedulerService_WatchTaskClient, t *reevev1.Task, push func(*reevev1.Task) error, out *sse, tick *time.Ticker) (*reevev1.Task, error) {
	type msg struct {
		t   *reevev1.Task
		err error
	}
	ch := make(chan msg, 1)
	go func() {
		for {
			resp, err := stream.Recv()
			select {
			case ch <- msg{resp.GetTask(), err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return t, ctx.Err()
		case <-tick.C:
			if err := out.comment("heartbeat"); err != nil {
				return t, err
			}
		case m := <-ch:
			if errors.Is(m.err, io.EOF) {
				return t, nil
			}
			if m.err != nil {
				return t, m.err
			}
			t = m.t
			if err := push(t); err != nil {
				return t, err
			}
		}
	}
}

// idle keeps a stream open with heartbeats until the client goes away.
func idle(ctx context.Context, out *sse, tick *time.Ticker) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if out.comment("heartbeat") != nil {
				return
			}
		}
	}
}

// pollChanges sends a "changed" event whenever fingerprint returns a value
// other than last (what the page shows; "" for unknown), checking every
// pollEvery: the fallback for views without a watch.
func pollChanges(ctx context.Context, out *sse, last string, fingerprint func(context.Context) (string, error)) {
	hb := time.NewTicker(heartbeat)
	defer hb.Stop()
	poll := time.NewTicker(pollEvery)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hb.C:
			if out.comment("heartbeat") != nil {
				return
			}
		case <-poll.C:
			fp, err := fingerprint(ctx)
			if err != nil {
				continue
			}
			if last != "" && fp != last {
				if out.send("changed", "", "") != nil {
					return
				}
			}
			last = fp
		}
	}
}
