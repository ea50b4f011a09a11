package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// maxAgentPages bounds the ListAgents pages (of 1,000 agents) the CLI reads
// to tell which agents are connected and which step types they serve.
const maxAgentPages = 10

// namespaceAgents is what the CLI knows of a namespace's agents connected
// to any scheduler (ListAgents): their ids and the step types they serve.
// A nil *namespaceAgents knows nothing: no step is marked.
type namespaceAgents struct {
	ids, served map[string]bool
	types       []string // the keys of served
}

// listAgents reads the agents of namespace ns, every page (at most
// maxAgentPages).
func listAgents(ctx context.Context, c reevev1.SchedulerServiceClient, ns string) (*namespaceAgents, error) {
	a := &namespaceAgents{ids: map[string]bool{}, served: map[string]bool{}}
	req := &reevev1.ListAgentsRequest{Namespace: ns, PageSize: 1000}
	for range maxAgentPages {
		resp, err := c.ListAgents(ctx, req)
		if err != nil {
			return nil, err
		}
		for _, ag := range resp.GetAgents() {
			a.ids[ag.GetAgentId()] = true
			for _, typ := range ag.GetStepTypes() {
				if !a.served[typ] {
					a.served[typ] = true
					a.types = append(a.types, typ)
				}
			}
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	return a, nil
}

// needsAgents reports whether printing t marks something from the agents:
// a dispatched step (disconnected?) or a queued one (unserved?).
func needsAgents(t *reevev1.Task) bool {
	return slices.ContainsFunc(t.GetSteps(), func(s *reevev1.Step) bool { return taskstate.Dispatched(s) || taskstate.Queued(s) })
}

// disconnected reports whether agent id is known not to be connected: false
// when a knows nothing.
func (a *namespaceAgents) disconnected(id string) bool {
	return a != nil && id != "" && !a.ids[id]
}

// unserved is "no agent serves TYPE; agents serve ..." for a queued step of
// t whose current execution's type no connected agent serves, else "".
func (a *namespaceAgents) unserved(t *reevev1.Task, s *reevev1.Step) string {
	if a == nil || !taskstate.Queued(s) {
		return ""
	}
	if typ := taskstate.ExecutionType(t, s); !a.served[typ] {
		return workflow.NoAgentServes(typ, a.types)
	}
	return ""
}

// warnUnserved writes to w warnings of the step types (and compensation
// types) of wf that none of the namespace's connected agents serves: their
// steps would wait for one. A type that looks like a typo of a served one
// gets a line of its own naming it; the others share one line (their
// agents may not have started yet).
func warnUnserved(w io.Writer, wf *reevev1.Workflow, agents *namespaceAgents) {
	var others []string
	check := func(what, typ string) {
		switch {
		case typ == "" || agents.served[typ] || slices.Contains(others, typ):
		case isTypo(typ, agents.types):
			fmt.Fprintf(w, "reeve: warning: %s: %s\n", what, workflow.NoAgentServes(typ, agents.types))
		default:
			others = append(others, typ)
		}
	}
	for _, s := range wf.GetSteps() {
		check(fmt.Sprintf("step %q", s.GetName()), s.GetType())
		check(fmt.Sprintf("compensation of step %q", s.GetName()), s.GetCompensation().GetType())
	}
	if len(others) > 0 {
		fmt.Fprintf(w, "reeve: warning: no agent serves %s now: their steps wait for one\n", strings.Join(others, ", "))
	}
}

func isTypo(typ string, served []string) bool {
	_, ok := workflow.Closest(typ, served)
	return ok
}
