package client

import (
	"context"
	"fmt"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// QueueService returns the raw reeve.v1.QueueService client on the same
// connection: flow control per step type (docs/architecture.md, "Flow
// control").
func (c *Client) QueueService() reevev1.QueueServiceClient {
	return reevev1.NewQueueServiceClient(c.cc)
}

// QueueLimit is what SetQueueLimit sets for a step type. Zero values mean
// no limit.
type QueueLimit struct {
	// MaxRunning bounds the attempts of the type running at once,
	// cluster-wide; 0: no limit.
	MaxRunning int32
	// Rate bounds the attempts started per second, cluster-wide; 0: no
	// limit.
	Rate float64
	// Burst is how many may start at once above the rate; 1 when 0 with a
	// rate.
	Burst int32
}

// SetQueueLimit sets the limits of a step type of the client's namespace
// (the namespace's admin role). The pause state is kept.
func (c *Client) SetQueueLimit(ctx context.Context, stepType string, l QueueLimit) (*reevev1.QueueConfig, error) {
	resp, err := c.QueueService().SetQueueLimit(ctx, &reevev1.SetQueueLimitRequest{
		Namespace: c.namespace, Type: stepType, MaxRunning: l.MaxRunning, Rate: l.Rate, Burst: l.Burst})
	if err != nil {
		return nil, fmt.Errorf("client: set queue limit %s: %w", stepType, err)
	}
	return resp.GetConfig(), nil
}

// ClearQueueLimit removes every limit of a step type.
func (c *Client) ClearQueueLimit(ctx context.Context, stepType string) (*reevev1.QueueConfig, error) {
	resp, err := c.QueueService().SetQueueLimit(ctx, &reevev1.SetQueueLimitRequest{Namespace: c.namespace, Type: stepType, Clear: true})
	if err != nil {
		return nil, fmt.Errorf("client: clear queue limit %s: %w", stepType, err)
	}
	return resp.GetConfig(), nil
}

// PauseQueue stops the dispatch of a step type: its steps stay queued.
func (c *Client) PauseQueue(ctx context.Context, stepType string) (*reevev1.QueueConfig, error) {
	resp, err := c.QueueService().PauseQueue(ctx, &reevev1.PauseQueueRequest{Namespace: c.namespace, Type: stepType})
	if err != nil {
		return nil, fmt.Errorf("client: pause queue %s: %w", stepType, err)
	}
	return resp.GetConfig(), nil
}

// ResumeQueue dispatches a paused step type again.
func (c *Client) ResumeQueue(ctx context.Context, stepType string) (*reevev1.QueueConfig, error) {
	resp, err := c.QueueService().ResumeQueue(ctx, &reevev1.ResumeQueueRequest{Namespace: c.namespace, Type: stepType})
	if err != nil {
		return nil, fmt.Errorf("client: resume queue %s: %w", stepType, err)
	}
	return resp.GetConfig(), nil
}

// ListQueues returns every step type of the client's namespace with a
// limit, a pause, queued steps or a connected agent.
func (c *Client) ListQueues(ctx context.Context) ([]*reevev1.Queue, error) {
	resp, err := c.QueueService().ListQueues(ctx, &reevev1.ListQueuesRequest{Namespace: c.namespace})
	if err != nil {
		return nil, fmt.Errorf("client: list queues: %w", err)
	}
	return resp.GetQueues(), nil
}
