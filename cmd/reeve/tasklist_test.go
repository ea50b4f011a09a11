package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// `task list --limit N` prints N tasks when there are more, even where the
// scheduler cut a page at its byte budget (2 MiB): 60 tasks of a 60 KiB
// input each make pages of about 34 in the full view.
func TestTaskListLimitFollowsPagesCutByBytes(t *testing.T) {
	s := testenv.New(t).StartScheduler("")
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	input := structpb.NewStringValue(strings.Repeat("x", 60<<10))
	wf := &reevev1.Workflow{Name: "big", Steps: []*reevev1.StepSpec{{Name: "s", Type: "nobody.serves", Timeout: durationpb.New(time.Minute)}}}
	const n = 60
	for i := range n {
		if _, err := c.SubmitTask(ctx, &reevev1.SubmitTaskRequest{TaskId: fmt.Sprintf("big-%02d", i), Input: input,
			Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: wf}}); err != nil {
			t.Fatal(err)
		}
	}
	// The situation: one page of 50 comes back cut short, with a token.
	page, err := c.ListTasks(ctx, &reevev1.ListTasksRequest{PageSize: 50, View: reevev1.TaskView_TASK_VIEW_FULL})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.GetTasks()) >= 50 || page.GetNextPageToken() == "" {
		t.Fatalf("a page of 50 tasks of 60 KiB held %d (token %q); want it cut at the byte budget", len(page.GetTasks()), page.GetNextPageToken())
	}

	list := func(args ...string) *reevev1.ListTasksResponse {
		t.Helper()
		code, out, errOut := reeve(t, s.Addr, append([]string{"task", "list", "-o", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("task list %v: exit %d: %s", args, code, errOut)
		}
		var resp reevev1.ListTasksResponse
		if err := protojson.Unmarshal([]byte(out), &resp); err != nil {
			t.Fatalf("task list %v: %v", args, err)
		}
		return &resp
	}
	first := list("--limit", "50")
	if len(first.GetTasks()) != 50 || first.GetNextPageToken() == "" {
		t.Fatalf("--limit 50 printed %d tasks (token %q); want 50 and a token for the other 10", len(first.GetTasks()), first.GetNextPageToken())
	}
	rest := list("--limit", "50", "--page-token", first.GetNextPageToken())
	if len(rest.GetTasks()) != n-50 || rest.GetNextPageToken() != "" {
		t.Fatalf("continuing: %d tasks (token %q); want the other %d and no token", len(rest.GetTasks()), rest.GetNextPageToken(), n-50)
	}
	seen := map[string]bool{}
	for _, task := range append(first.GetTasks(), rest.GetTasks()...) {
		seen[task.GetId()] = true
	}
	if len(seen) != n {
		t.Fatalf("the two lists hold %d distinct tasks; want all %d", len(seen), n)
	}

	// The table (full view, so that the budget cuts it too), and without
	// --limit the default of 100 takes all 60.
	code, out, errOut := reeve(t, s.Addr, "task", "list", "--view", "full", "--limit", "45")
	if rows := strings.Count(out, "big-"); code != 0 || rows != 45 || !strings.Contains(out, "(more: --page-token ") {
		t.Fatalf("table --view full --limit 45: exit %d, %d rows: %s %s", code, rows, out, errOut)
	}
	if all := list(); len(all.GetTasks()) != n || all.GetNextPageToken() != "" {
		t.Fatalf("no --limit: %d tasks (token %q); want all %d", len(all.GetTasks()), all.GetNextPageToken(), n)
	}
	for _, args := range [][]string{{"--limit", "-1"}, {"--all", "--limit", "1001"}} {
		if code, _, errOut := reeve(t, s.Addr, append([]string{"task", "list"}, args...)...); code != exitUsage || !strings.Contains(errOut, "--limit") {
			t.Errorf("task list %v: exit %d (%s); want a usage error naming --limit", args, code, errOut)
		}
	}
}
