package scheduler

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// RegisterWorkflow implements SchedulerService.
func (svc *schedulerService) RegisterWorkflow(ctx context.Context, req *reevev1.RegisterWorkflowRequest) (*reevev1.RegisterWorkflowResponse, error) {
	if req.GetWorkflow() == nil {
		return nil, statusErr(&workflow.FieldError{Field: "workflow", Reason: "required"})
	}
	if err := workflow.ValidateNamespace("workflow.namespace", req.GetWorkflow().GetNamespace()); err != nil {
		return nil, statusErr(err)
	}
	if err := workflow.ValidateWorkflow("workflow", req.GetWorkflow(), true); err != nil {
		return nil, statusErr(err)
	}
	if err := svc.store.CheckWorkflowOps("workflow", req.GetWorkflow()); err != nil {
		return nil, statusErr(err)
	}
	w := proto.Clone(req.GetWorkflow()).(*reevev1.Workflow)
	w.Namespace = workflow.Namespace(w.GetNamespace())
	w.CreateTime = timestamppb.New(svc.opts.clock.Now())
	if proto.Size(w) > workflow.MaxWorkflowBytes {
		return nil, statusErr(&workflow.FieldError{Field: "workflow", Reason: fmt.Sprintf("definition is %d bytes encoded, more than %d", proto.Size(w), workflow.MaxWorkflowBytes)})
	}
	stored, created, err := svc.store.PutWorkflow(ctx, w, workflow.Fingerprint)
	if err != nil {
		return nil, statusErr(err)
	}
	return &reevev1.RegisterWorkflowResponse{Workflow: stored, Created: created}, nil
}

// GetWorkflow implements SchedulerService.
func (svc *schedulerService) GetWorkflow(ctx context.Context, req *reevev1.GetWorkflowRequest) (*reevev1.GetWorkflowResponse, error) {
	if err := workflow.ValidateNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, statusErr(err)
	}
	if err := workflow.ValidateName("name", req.GetName()); err != nil {
		return nil, statusErr(err)
	}
	if req.GetVersion() < 0 {
		return nil, statusErr(&workflow.FieldError{Field: "version", Reason: "must not be negative"})
	}
	w, err := svc.store.GetWorkflow(ctx, workflow.Namespace(req.GetNamespace()), req.GetName(), req.GetVersion())
	if err != nil {
		return nil, statusErr(err)
	}
	return &reevev1.GetWorkflowResponse{Workflow: w}, nil
}

// ListWorkflows implements SchedulerService.
func (svc *schedulerService) ListWorkflows(ctx context.Context, req *reevev1.ListWorkflowsRequest) (*reevev1.ListWorkflowsResponse, error) {
	if err := workflow.ValidateNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, statusErr(err)
	}
	ns := workflow.Namespace(req.GetNamespace())
	size, after, err := page(pageWorkflows, ns, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, statusErr(err)
	}
	if after != "" && workflow.ValidateName("page_token", after) != nil {
		return nil, statusErr(&workflow.FieldError{Field: "page_token", Reason: "not a page token; pass the next_page_token of a previous response"})
	}
	wfs, more, err := svc.store.ListWorkflows(ctx, ns, after, size)
	if err != nil {
		return nil, statusErr(err)
	}
	resp := &reevev1.ListWorkflowsResponse{Workflows: wfs}
	if more {
		resp.NextPageToken = encodePageToken(pageWorkflows, ns, wfs[len(wfs)-1].GetName())
	}
	return resp, nil
}
