package scheduler

import (
	"context"
	"fmt"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/workflow"
)

// ListAlerts implements SupervisorService.
func (svc *supervisorService) ListAlerts(ctx context.Context, req *reevev1.ListAlertsRequest) (*reevev1.ListAlertsResponse, error) {
	if err := workflow.ValidateNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, statusErr(err)
	}
	ns := workflow.Namespace(req.GetNamespace())
	filters := fmt.Sprintf("%s\x00%v", ns, req.GetIncludeAcknowledged())
	size, after, err := page(pageAlerts, filters, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, statusErr(err)
	}
	alerts, more, err := svc.store.ListAlerts(ctx, ns, req.GetIncludeAcknowledged(), after, size)
	if err != nil {
		return nil, statusErr(err)
	}
	resp := &reevev1.ListAlertsResponse{Alerts: alerts}
	if more {
		resp.NextPageToken = encodePageToken(pageAlerts, filters, alerts[len(alerts)-1].GetId())
	}
	return resp, nil
}

// WatchAlerts implements SupervisorService.
func (svc *supervisorService) WatchAlerts(req *reevev1.WatchAlertsRequest, stream reevev1.SupervisorService_WatchAlertsServer) error {
	if err := workflow.ValidateNamespace("namespace", req.GetNamespace()); err != nil {
		return statusErr(err)
	}
	err := svc.store.WatchAlerts(stream.Context(), workflow.Namespace(req.GetNamespace()), func(a *reevev1.Alert) error {
		return stream.Send(&reevev1.WatchAlertsResponse{Alert: a})
	})
	if stream.Context().Err() != nil {
		return nil
	}
	return statusErr(err)
}

// AckAlert implements SupervisorService.
func (svc *supervisorService) AckAlert(ctx context.Context, req *reevev1.AckAlertRequest) (*reevev1.AckAlertResponse, error) {
	if err := workflow.ValidateNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, statusErr(err)
	}
	if req.GetAlertId() == "" || len(req.GetAlertId()) > 256 {
		return nil, statusErr(&workflow.FieldError{Field: "alert_id", Reason: "required, at most 256 characters"})
	}
	if len(req.GetAcknowledgedBy()) > workflow.MaxAgentIDLen {
		return nil, statusErr(&workflow.FieldError{Field: "acknowledged_by", Reason: "at most 128 characters"})
	}
	by := req.GetAcknowledgedBy()
	if by == "" {
		by = actorOf(ctx, "operator")
	}
	a, err := svc.store.AckAlert(ctx, workflow.Namespace(req.GetNamespace()), req.GetAlertId(), by, svc.opts.clock.Now())
	if err != nil {
		return nil, statusErr(err)
	}
	return &reevev1.AckAlertResponse{Alert: a}, nil
}
