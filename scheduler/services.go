package scheduler

import reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"

// The gRPC services of a Server, one type each: thin handlers that
// validate the request, call the engine (Server) and map its errors to a
// status (statusErr). Each handler stays in the file of the engine code it
// calls:
//
//	schedulerService: SubmitTask (submit.go); GetTask, WatchTask, CancelTask
//	  (tasks.go); ListTasks, CountTasks, WatchTasks (list.go);
//	  RegisterWorkflow, GetWorkflow, ListWorkflows (workflows.go);
//	  ListAgents (agents.go)
//	agentService: Connect (connect.go)
//	supervisorService: RetryStep, CompensateTask, FailTask (recovery.go);
//	  RecoverSteps (recover_steps.go); ListAlerts, WatchAlerts, AckAlert
//	  (alerts.go)
//
// Server.Register registers the three; New builds them once.
var (
	_ reevev1.SchedulerServiceServer  = (*schedulerService)(nil)
	_ reevev1.AgentServiceServer      = (*agentService)(nil)
	_ reevev1.SupervisorServiceServer = (*supervisorService)(nil)
)

// schedulerService implements reeve.v1.SchedulerService: clients' tasks,
// workflows and agents.
type schedulerService struct {
	reevev1.UnimplementedSchedulerServiceServer
	eng *Server
}

// agentService implements reeve.v1.AgentService: agents' Connect streams.
type agentService struct {
	reevev1.UnimplementedAgentServiceServer
	eng *Server
}

// supervisorService implements reeve.v1.SupervisorService: the
// supervisor's fenced recoveries and operators' alerts.
type supervisorService struct {
	reevev1.UnimplementedSupervisorServiceServer
	eng *Server
}
