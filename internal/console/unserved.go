package console

import (
	"net/http"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/taskstate"
	"github.com/reeve-org/reeve/internal/workflow"
)

// namespaceAgents is what a task page knows of its namespace's agents
// connected to any scheduler (ListAgents): their ids and the step types
// they serve. A nil *namespaceAgents knows nothing: no step is marked.
type namespaceAgents struct {
	ids, served map[string]bool
	types       []string // the keys of served
}

// namespaceAgents reads the agents of namespace ns, every page (at most
// maxAgentPages, as the agents page), or returns nil when ListAgents fails.
func (s *Server) namespaceAgents(r *http.Request, ss *session, ns string) *namespaceAgents {
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	a := &namespaceAgents{ids: map[string]bool{}, served: map[string]bool{}}
	req := &reevev1.ListAgentsRequest{Namespace: ns, PageSize: 1000}
	for range maxAgentPages {
		resp, err := s.sched.ListAgents(ctx, req, opts...)
		if err != nil {
			return nil
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
	return a
}

// disconnected reports whether step st is dispatched to an agent known not
// to be connected.
func (a *namespaceAgents) disconnected(st *reevev1.Step) bool {
	return a != nil && taskstate.Dispatched(st) && st.GetLockedByAgent() != "" && !a.ids[st.GetLockedByAgent()]
}

// unserved is "no agent serves TYPE; agents serve ..." for a queued step
// of t whose current execution's type no connected agent serves, else "".
func (a *namespaceAgents) unserved(t *reevev1.Task, st *reevev1.Step) string {
	if a == nil || !taskstate.Queued(st) {
		return ""
	}
	if typ := taskstate.ExecutionType(t, st); !a.served[typ] {
		return workflow.NoAgentServes(typ, a.types)
	}
	return ""
}
