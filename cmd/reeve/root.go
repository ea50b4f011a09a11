package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/status"

	"github.com/reeve-org/reeve/internal/dial"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // an RPC or runtime error
	exitUsage = 2 // bad flags or arguments
	// exitTaskNotSucceeded: task submit --wait saw the task end FAILED,
	// COMPENSATED or CANCELED.
	exitTaskNotSucceeded = 3
)

// usageError is a mistake in the command line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitCodeError ends the command with a chosen exit code after its output
// was printed.
type exitCodeError struct{ code int }

func (e exitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// globals are the flags every client command has.
type globals struct {
	address   string
	output    string
	namespace string
	timeout   time.Duration
	sec       clientSecurity
	config    string
	getenv    func(string) string
}

// run executes the reeve command line and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	root := newRootCmd(getenv)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	var exit exitCodeError
	var usage usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &exit):
		return exit.code
	case errors.As(err, &usage):
		var file *fileError
		if errors.As(err, &file) {
			fmt.Fprintf(stderr, "reeve: %v\n", err) // the file's mistake, not the command's
			return exitUsage
		}
		fmt.Fprintf(stderr, "reeve: %v\nRun 'reeve --help' for usage.\n", err)
		return exitUsage
	}
	if st, ok := status.FromError(err); ok {
		fmt.Fprintf(stderr, "reeve: %s (%s)\n", st.Message(), st.Code())
		if hint := transportHint(st); hint != "" {
			fmt.Fprintf(stderr, "reeve: hint: %s\n", hint)
		}
		return exitError
	}
	fmt.Fprintf(stderr, "reeve: %v\n", err)
	return exitError
}

func newRootCmd(getenv func(string) string) *cobra.Command {
	g := &globals{getenv: getenv}
	root := &cobra.Command{
		Use:           "reeve",
		Short:         "Reeve runs multi-step work across unreliable services and finishes it, or undoes it",
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if g.config != "" {
				if err := applyConfig(cmd, g.config); err != nil {
					return usagef("--config: %v", err)
				}
			}
			if g.output != "table" && g.output != "json" {
				return usagef("--output: want table or json, got %q", g.output)
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&g.address, "address", envOr(getenv, "REEVE_ADDRESS", "127.0.0.1:7430"), "scheduler address, or several comma-separated to spread requests over them (env REEVE_ADDRESS)")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	pf.StringVarP(&g.namespace, "namespace", "n", envOr(getenv, "REEVE_NAMESPACE", "default"), "namespace (env REEVE_NAMESPACE)")
	pf.DurationVar(&g.timeout, "timeout", 10*time.Second, "timeout of each request (not of --wait or watch)")
	pf.StringVar(&g.config, "config", getenv("REEVE_CONFIG"), "YAML file of flag values (name: value) for this command; the command line wins over it, it wins over the environment (env REEVE_CONFIG)")
	g.sec.register(root, getenv)

	root.AddCommand(newTaskCmd(g), newBatchCmd(g), newWorkflowCmd(g), newScheduleCmd(g), newQueueCmd(g), newAgentsCmd(g), newAlertsCmd(g), newBenchCmd(g), newConformanceCmd(g), newConsoleCmd(g), newVerifyCmd(g))
	root.AddCommand(serverCommands(g)...)
	root.AddCommand(newCertsCmd(), newVersionCmd(g))
	// Unknown subcommands and bad argument counts are usage errors.
	walk(root, func(c *cobra.Command) {
		if c.Args == nil && !c.Runnable() {
			c.Args = cobra.NoArgs
		}
		if args := c.Args; args != nil {
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					return usageError{err}
				}
				return nil
			}
		}
		if !c.Runnable() && c.HasSubCommands() {
			c.RunE = func(cmd *cobra.Command, a []string) error {
				if len(a) > 0 {
					return usagef("unknown command %q for %q", a[0], cmd.CommandPath())
				}
				return cmd.Help()
			}
		}
	})
	return root
}

func walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walk(sub, fn)
	}
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// requestCtx bounds one unary request by --timeout.
func (g *globals) requestCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.timeout)
}

// cliTLS names the command's TLS flags in a transport hint.
var cliTLS = dial.Settings{
	CA:         "--tls-ca (REEVE_TLS_CA)",
	ClientCert: "--tls-cert/--tls-key",
	Plaintext:  "drop --tls, --tls-ca, --tls-cert and --tls-key",
}

// transportHint explains the transport errors that a plaintext client
// talking to a TLS scheduler, or the reverse, or a client certificate the
// scheduler refuses, gets from gRPC (dial.Hint).
func transportHint(st *status.Status) string { return dial.Hint(st.Err(), cliTLS) }
