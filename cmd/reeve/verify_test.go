package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/testenv"
)

// reeve verify: 0 on a store written by a scheduler, 1 with a JSON list
// naming the orphan key once one is planted.
func TestVerifyExitCodeAndJSON(t *testing.T) {
	env := testenv.New(t)
	s := env.StartScheduler("")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.SchedulerService().SubmitTask(ctx, &reevev1.SubmitTaskRequest{Workflow: &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: &reevev1.Workflow{
		Name: "v", Steps: []*reevev1.StepSpec{{Name: "a", Type: "t"}}}}}); err != nil {
		t.Fatal(err)
	}
	endpoints := strings.Join(env.Etcd.Endpoints(), ",")
	if code, out, errOut := reeve(t, "", "verify", "--etcd-endpoints", endpoints); code != 0 || !strings.Contains(out, "0 violations") {
		t.Fatalf("clean store: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := env.Etcd.Client().Put(ctx, "/reeve/ready/default/ghost/a", ""); err != nil {
		t.Fatal(err)
	}
	code, out, _ := reeve(t, "", "verify", "--etcd-endpoints", endpoints, "-o", "json")
	var rep struct {
		Violations []struct{ Kind, Key string } `json:"violations"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if code != 1 || len(rep.Violations) != 1 || rep.Violations[0].Kind != "orphan_index_key" || rep.Violations[0].Key != "/reeve/ready/default/ghost/a" {
		t.Fatalf("orphan: exit %d, %+v", code, rep)
	}
	if code, _, errOut := reeve(t, "", "verify"); code == 0 || !strings.Contains(errOut, "--etcd-endpoints") {
		t.Fatalf("no endpoints: exit %d, %s", code, errOut)
	}
}
