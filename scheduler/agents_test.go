package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// Every agent connected to any scheduler is listed from any scheduler,
// with its scheduler, capacity and in-flight steps, and every step type's
// ready queue with its depth and oldest step.
func TestListAgentsAcrossSchedulers(t *testing.T) {
	env := testenv.New(t)
	s1, s2 := env.StartScheduler(""), env.StartScheduler("")
	c1 := s1.Client(t)
	a1 := testenv.ConnectRaw(t, s1.Addr, register("agent-1", 4, "work"))
	a2 := testenv.ConnectRaw(t, s2.Addr, register("agent-2", 2, "work", "other"))
	// Two tasks run (one per agent, whichever takes it), three wait for a
	// type nobody serves.
	ctx, cancel := context.WithTimeout(context.Background(), 3*wait)
	defer cancel()
	for i := range 2 {
		if _, err := c1.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: "work-" + string(rune('a'+i)), Workflow: inline(step("x", "work"))}); err != nil {
			t.Fatal(err)
		}
	}
	submitMany(t, c1, "queued", 3, "wf", nil) // type "nobody"
	_ = a1
	_ = a2

	// Condition wait: the in-flight counts of the other scheduler's agent
	// arrive within its publication interval, and the queued steps reach
	// this scheduler's queue through its watch of ready/ (the work tasks
	// may be claimed on submit, before the watch has delivered those).
	deadline := time.Now().Add(wait)
	var resp *reevev1.ListAgentsResponse
	for {
		var err error
		resp, err = c1.ListAgents(ctx, &reevev1.ListAgentsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var total int32
		for _, a := range resp.GetAgents() {
			total += a.GetInFlight()
		}
		var nobody int64
		for _, q := range resp.GetQueues() {
			if q.GetStepType() == "nobody" {
				nobody = q.GetDepth()
			}
		}
		if len(resp.GetAgents()) == 2 && total == 2 && nobody == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agents %v, queues %v: want 2 agents running 2 steps between them and 3 steps queued for nobody", resp.GetAgents(), resp.GetQueues())
		}
		time.Sleep(50 * time.Millisecond) // polling an eventually consistent read, bounded above
	}
	want := map[string]struct {
		sched string
		max   int32
		types int
	}{"agent-1": {s1.ID(), 4, 1}, "agent-2": {s2.ID(), 2, 2}}
	for _, a := range resp.GetAgents() {
		w := want[a.GetAgentId()]
		if a.GetSchedulerId() != w.sched || a.GetMaxConcurrentSteps() != w.max || len(a.GetStepTypes()) != w.types ||
			a.GetCredits() != w.max-a.GetInFlight() || a.GetConnectedSince() == nil || a.GetNamespace() != "default" {
			t.Errorf("agent %v, want scheduler %s, max %d, %d types, credits = max - in flight, connected since set", a, w.sched, w.max, w.types)
		}
	}
	queues := map[string]*reevev1.QueueInfo{}
	for _, q := range resp.GetQueues() {
		queues[q.GetStepType()] = q
	}
	if q := queues["nobody"]; q.GetDepth() != 3 || q.GetOldestReadyTime() == nil {
		t.Errorf("queue nobody: %v, want depth 3 with its oldest ready time", q)
	}
	if q := queues["other"]; q == nil || q.GetDepth() != 0 || q.GetOldestReadyTime() != nil {
		t.Errorf("queue other: %v, want present (an agent serves it) and empty", q)
	}
	// The same from the other scheduler.
	resp2, err := s2.Client(t).ListAgents(ctx, &reevev1.ListAgentsRequest{})
	if err != nil || len(resp2.GetAgents()) != 2 {
		t.Fatalf("from the second scheduler: %v, %v; want both agents", resp2, err)
	}
	// An agent that disconnects leaves the list.
	a1.Close()
	deadline = time.Now().Add(wait)
	for {
		resp, err := c1.ListAgents(ctx, &reevev1.ListAgentsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetAgents()) == 1 && resp.GetAgents()[0].GetAgentId() == "agent-2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agents %v after agent-1 left, want only agent-2", resp.GetAgents())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := c1.ListAgents(ctx, &reevev1.ListAgentsRequest{Namespace: "a/b"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad namespace: %v, want INVALID_ARGUMENT", err)
	}
}

// ListAgents pages by agent id: every agent comes exactly once over the
// pages, the queues come with the first page, and a page size over the
// maximum is lowered, not refused.
func TestListAgentsPages(t *testing.T) {
	_, s, c := newEnv(t)
	ids := []string{"p-1", "p-2", "p-3", "p-4", "p-5"}
	for _, id := range ids {
		testenv.ConnectRaw(t, s.Addr, register(id, 1, "type-"+id))
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	// Condition wait: an agent's record is written just after its
	// Registered is sent.
	for deadline := time.Now().Add(wait); ; {
		resp, err := c.ListAgents(ctx, &reevev1.ListAgentsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetAgents()) == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d agents listed, want %d", len(resp.GetAgents()), len(ids))
		}
		time.Sleep(10 * time.Millisecond)
	}
	var got []string
	pages := 0
	req := &reevev1.ListAgentsRequest{PageSize: 2}
	for {
		resp, err := c.ListAgents(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(resp.GetAgents()) > 2 {
			t.Fatalf("page %d has %d agents, want at most 2", pages, len(resp.GetAgents()))
		}
		if first := req.PageToken == ""; first != (len(resp.GetQueues()) > 0) {
			t.Fatalf("page %d: %d queues; want them on the first page only", pages, len(resp.GetQueues()))
		}
		for _, a := range resp.GetAgents() {
			got = append(got, a.GetAgentId())
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" || pages > len(ids) {
			break
		}
	}
	if pages != 3 || strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Fatalf("%d pages listing %v, want 3 listing %v", pages, got, ids)
	}
	resp, err := c.ListAgents(ctx, &reevev1.ListAgentsRequest{PageSize: 1 << 20})
	if err != nil || len(resp.GetAgents()) != len(ids) || resp.GetNextPageToken() != "" {
		t.Fatalf("page size over the maximum: %d agents, token %q, %v; want all %d in one page", len(resp.GetAgents()), resp.GetNextPageToken(), err, len(ids))
	}
	if _, err := c.ListAgents(ctx, &reevev1.ListAgentsRequest{PageToken: resp.GetNextPageToken() + "x"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("forged token: %v, want INVALID_ARGUMENT", err)
	}
}
