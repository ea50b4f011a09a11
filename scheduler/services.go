package scheduler

import (
	"log/slog"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/taskread"
)

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
	opts  *options
	log   *slog.Logger
	eng   *engine
	store *store.Store     // workflows, queries, watches
	tasks *taskread.Reader // etcd, then the archive
	adm   *admission
	disp  *dispatcher // ListAgents: this scheduler's streams and queues
	tel   *instruments
	// lookups batches SubmitTask's archive checks; nil without an archive.
	lookups *archiveLookups
	// dedup answers them while the archive is unavailable; nil without an
	// archive or with WithArchiveDedupWindow(0).
	dedup *dedupWindow
}

// agentService implements reeve.v1.AgentService: agents' Connect streams.
type agentService struct {
	reevev1.UnimplementedAgentServiceServer
	agents *agents
}

// supervisorService implements reeve.v1.SupervisorService: the
// supervisor's fenced recoveries and operators' alerts.
type supervisorService struct {
	reevev1.UnimplementedSupervisorServiceServer
	opts  *options
	log   *slog.Logger
	eng   *engine
	store *store.Store // alerts, the election's prefix
	// schedules fires the schedules of FireSchedules (schedule_fire.go).
	schedules *schedules
}
