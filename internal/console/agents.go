package console

import (
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

type agentsData struct {
	pageData
	Agents []*reevev1.AgentInfo
	Queues []*reevev1.QueueInfo
	Note   string
}

// maxAgentPages bounds the agents page at 10 pages of 1,000 agents.
const maxAgentPages = 10

// agentsPage shows every agent connected to any scheduler of the cluster,
// and the ready queue of each step type, from the API's ListAgents.
func (s *Server) agentsPage(w http.ResponseWriter, r *http.Request, ss *session) {
	ns := workflow.Namespace(r.URL.Query().Get("ns"))
	if err := workflow.ValidateNamespace("ns", ns); err != nil {
		s.renderError(w, r, ss, http.StatusBadRequest, "Bad request", err.Error())
		return
	}
	d := agentsData{pageData: s.page(r, ss, "Agents and queues", "agents", ns)}
	ctx, cancel, opts := s.call(r, ss)
	defer cancel()
	// Up to maxAgentPages pages; the queues come with the first.
	req := &reevev1.ListAgentsRequest{Namespace: ns, PageSize: 1000}
	resp, err := s.sched.ListAgents(ctx, req, opts...)
	for i := 1; err == nil && resp.GetNextPageToken() != "" && i < maxAgentPages; i++ {
		req.PageToken = resp.GetNextPageToken()
		var next *reevev1.ListAgentsResponse
		if next, err = s.sched.ListAgents(ctx, req, opts...); err == nil {
			resp.Agents, resp.NextPageToken = append(resp.Agents, next.GetAgents()...), next.GetNextPageToken()
		}
	}
	switch {
	case status.Code(err) == codes.Unimplemented:
		d.Note = "This scheduler does not serve ListAgents (an older version): upgrade it to see agents and queues."
	case err != nil:
		s.apiError(w, r, ss, "list agents", err)
		return
	default:
		d.Agents, d.Queues = resp.GetAgents(), resp.GetQueues()
	}
	s.render(w, r, http.StatusOK, "agents", d)
}
