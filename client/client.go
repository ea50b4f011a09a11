package client

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/dial"
)

// Client is a connection to Reeve's schedulers. It is safe for concurrent
// use; make one per process and Close it when done.
type Client struct {
	cc        *grpc.ClientConn
	scheduler reevev1.SchedulerServiceClient
	operator  reevev1.SupervisorServiceClient
	namespace string
}

// Dial returns a Client of the schedulers at address: one host:port, or
// several comma-separated, over which calls are spread round-robin (a
// scheduler that fails is skipped until it answers again). Like
// grpc.NewClient it does not connect: an unreachable scheduler shows in the
// first call. It fails when an option cannot be used (a client certificate
// or a token without TLS, a TLS file that cannot be read).
func Dial(address string, opts ...Option) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	cfg := dial.Config{Address: address, Token: o.token}
	if o.tls != nil {
		cfg.TLS, cfg.CA, cfg.Cert, cfg.Key, cfg.ServerName = true, o.tls.CA, o.tls.Cert, o.tls.Key, o.tls.ServerName
	}
	extra := append(dial.HintInterceptors(clientTLS), grpc.WithChainUnaryInterceptor(dial.RetryRefusals(o.refusalRetries, repeatable)))
	cc, err := dial.Schedulers(cfg, append(extra, o.dialOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Client{
		cc:        cc,
		scheduler: reevev1.NewSchedulerServiceClient(cc),
		operator:  reevev1.NewSupervisorServiceClient(cc),
		namespace: o.namespace,
	}, nil
}

// clientTLS names the Client's TLS options in the hint added to the
// message of a transport error (dial.Hint).
var clientTLS = dial.Settings{
	CA:         "client.WithTLSFiles(client.TLSFiles{CA: ...})",
	ClientCert: "TLSFiles.Cert and Key",
	Plaintext:  "drop client.WithTLSFiles",
}

// repeatable reports whether a call may be sent again after UNAVAILABLE:
// reads, and the writes that are idempotent (a Submit with its task id,
// which the Client always sets; a Cancel; a completion from outside).
func repeatable(method string) bool {
	name := method[strings.LastIndex(method, "/")+1:]
	return strings.HasPrefix(name, "Get") || strings.HasPrefix(name, "List") ||
		name == "SubmitTask" || name == "CancelTask" || name == "CompleteStep"
}

// Close closes the connection; calls in flight fail.
func (c *Client) Close() error { return c.cc.Close() }

// SchedulerService returns the generated client of the scheduler's API on
// the Client's connection, for calls the Client does not wrap
// (RegisterWorkflow, ListTasks...).
func (c *Client) SchedulerService() reevev1.SchedulerServiceClient { return c.scheduler }

// Submit starts a task of the registered workflow named workflow (see
// WithInlineWorkflow for a definition sent with the task) with input, which
// is encoded as JSON (nil for none; at most 64 KiB encoded) and passed to
// every step. It returns when the task is recorded, not when it ends: use
// the Run's Wait or Get. Submitting a task id again (WithTaskID) returns the
// task already submitted.
func (c *Client) Submit(ctx context.Context, workflow string, input any, opts ...SubmitOption) (*Run, error) {
	o := submitOptions{namespace: c.namespace}
	for _, opt := range opts {
		opt(&o)
	}
	if o.taskID == "" {
		o.taskID = uuid.NewString()
	}
	req := &reevev1.SubmitTaskRequest{Namespace: o.namespace, TaskId: o.taskID, Labels: o.labels}
	o.timers.apply(req, time.Now())
	switch {
	case o.inline != nil:
		if workflow != "" && workflow != o.inline.GetName() {
			return nil, fmt.Errorf("client: submit: workflow %q is not the inline workflow's name %q", workflow, o.inline.GetName())
		}
		req.Workflow = &reevev1.SubmitTaskRequest_InlineWorkflow{InlineWorkflow: o.inline}
	default:
		req.Workflow = &reevev1.SubmitTaskRequest_WorkflowRef{WorkflowRef: &reevev1.WorkflowRef{Name: workflow, Version: o.version}}
	}
	v, err := encode(input)
	if err != nil {
		return nil, fmt.Errorf("client: submit: input: %w", err)
	}
	req.Input = v
	resp, err := c.scheduler.SubmitTask(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("client: submit %s: %w", o.taskID, err)
	}
	return &Run{c: c, namespace: o.namespace, id: resp.GetTask().GetId(), created: resp.GetCreated()}, nil
}

// GetRun returns a handle on the task id of the Client's namespace, one
// submitted earlier or by another process. It makes no call: a task that
// does not exist shows as NOT_FOUND on the Run's first call.
func (c *Client) GetRun(id string) *Run {
	return &Run{c: c, namespace: c.namespace, id: id}
}

// encode converts a Go value to a google.protobuf.Value through JSON, so
// that structs with json tags are sent as their JSON form.
func encode(v any) (*structpb.Value, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := &structpb.Value{}
	if err := protojson.Unmarshal(b, out); err != nil {
		return nil, err
	}
	return out, nil
}
