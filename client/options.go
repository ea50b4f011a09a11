package client

import (
	"google.golang.org/grpc"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// options are the knobs of Dial.
type options struct {
	namespace      string
	tls            *TLSFiles
	token          string
	refusalRetries int
	dialOpts       []grpc.DialOption
}

func defaultOptions() options {
	return options{namespace: "default", refusalRetries: 5}
}

// Option configures a Client at Dial.
type Option func(*options)

// WithNamespace is the namespace of the Client's tasks: Submit's (unless
// InNamespace says otherwise) and GetRun's. Default "default".
func WithNamespace(ns string) Option { return func(o *options) { o.namespace = ns } }

// TLSFiles names the PEM files of WithTLSFiles.
type TLSFiles struct {
	// CA is the bundle the schedulers' certificates must chain to; default
	// the system's roots.
	CA string
	// Cert and Key are the client certificate and private key presented to
	// the schedulers (mutual TLS); default none.
	Cert, Key string
	// ServerName is the name every scheduler's certificate is verified
	// against; default the host of each address.
	ServerName string
}

// WithTLSFiles connects over TLS configured from files (TLSFiles{} is TLS
// verified against the system's roots, with no client certificate). Default
// plaintext. The files are read once, by Dial.
func WithTLSFiles(f TLSFiles) Option { return func(o *options) { o.tls = &f } }

// WithToken sends tok as a bearer token with every call; default none.
// gRPC sends tokens over TLS only: use it with WithTLSFiles, or Dial fails.
func WithToken(tok string) Option { return func(o *options) { o.token = tok } }

// WithRefusalRetries is how often one call refused for load is sent again,
// after the delay the scheduler asked for in its google.rpc.RetryInfo
// detail: any call refused with RESOURCE_EXHAUSTED (a refusal changes
// nothing), and reads, Submit and Cancel (which are idempotent) refused
// with UNAVAILABLE. A refusal without a delay, or whose delay would pass the
// call's deadline, is returned at once. Default 5; 0 turns retries off.
func WithRefusalRetries(n int) Option { return func(o *options) { o.refusalRetries = n } }

// WithDialOptions adds gRPC dial options (a stats handler, interceptors)
// after the Client's own; default none.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// submitOptions are the knobs of Submit.
type submitOptions struct {
	taskID    string
	namespace string
	version   int32
	inline    *reevev1.Workflow
	labels    map[string]string
	timers    submitTimers // timers.go
}

// SubmitOption configures one Submit.
type SubmitOption func(*submitOptions)

// WithTaskID gives the task id: submitting the same id again returns the
// task already submitted (idempotent submission), and with another workflow
// or input fails with ALREADY_EXISTS. 1-128 characters from
// [A-Za-z0-9._:-], starting with a letter or digit. Default: a random UUID
// chosen by the Client, so that Submit can be repeated safely after an
// UNAVAILABLE refusal.
func WithTaskID(id string) SubmitOption { return func(o *submitOptions) { o.taskID = id } }

// InNamespace submits the task in ns; default the Client's namespace
// (WithNamespace). The Run returned acts in that namespace.
func InNamespace(ns string) SubmitOption { return func(o *submitOptions) { o.namespace = ns } }

// WithWorkflowVersion runs version v of the registered workflow; default 0,
// the latest.
func WithWorkflowVersion(v int32) SubmitOption { return func(o *submitOptions) { o.version = v } }

// WithLabels gives the task labels to find it by (lists and batch jobs
// filter by them): at most 16; keys 1-63 and values 0-63 characters from
// [A-Za-z0-9._-].
func WithLabels(labels map[string]string) SubmitOption {
	return func(o *submitOptions) { o.labels = labels }
}

// WithInlineWorkflow runs w, a definition sent with the task, instead of a
// registered workflow; Submit's workflow argument must then be "" or
// w's name. Default: the registered workflow named by Submit.
func WithInlineWorkflow(w *reevev1.Workflow) SubmitOption {
	return func(o *submitOptions) { o.inline = w }
}
