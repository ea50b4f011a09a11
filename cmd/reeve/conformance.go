package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/internal/auth"
	"github.com/reeve-org/reeve/internal/conformance"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

func newConformanceCmd(g *globals) *cobra.Command {
	var (
		listen, run, agent string
		connectTimeout     time.Duration
		secure             bool
	)
	cmd := &cobra.Command{
		Use:   "conformance [flags] [--agent 'COMMAND LINE' | -- AGENT-COMMAND [ARG...]]",
		Short: "Check that an agent, in any language, speaks the agent protocol correctly",
		Long: `conformance plays the scheduler on --listen and drives the agent under test
through the protocol's cases (docs/agent-protocol.md): assignment and result,
error result, deadline passed, cancel, stale attempt, refused result, result
redelivery after a broken stream, drain and reconnect, heartbeats, graceful
shutdown. The agent must handle the step type "` + conformance.StepType + `" as
docs/agent-protocol.md describes.

With AGENT-COMMAND (or --agent, a command line run by sh) the suite starts
the agent itself, with REEVE_ADDRESS set to the suite's address, sends its
output to stderr, and stops it at the end; the shutdown case (SIGTERM) runs
only then. Without either, start the agent yourself against the printed
address.

With --secure the suite serves mutual TLS with role checks, as a secure
scheduler does: it makes a CA, a server certificate and an agent
certificate (grant reeve://agent/*) in a temporary directory and gives the
agent REEVE_TLS_CA, REEVE_TLS_CERT and REEVE_TLS_KEY.

Prints one line per case (or the report as JSON with -o json) and exits 1 when
a case failed.`,
		Example: `  reeve conformance -- node examples/node/dist/agent.js
  reeve conformance --agent 'cd examples/node && node dist/agent.js'
  reeve conformance -o json -- reeve conformance agent
  reeve conformance --secure -- reeve conformance agent
  reeve conformance --listen 127.0.0.1:7450 --run 'drain|redelivery'`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case agent != "" && len(args) > 0:
				return usagef("--agent and an agent command after -- are exclusive")
			case agent != "":
				args = shellAgent(agent)
			}
			cfg := conformance.Config{Listen: listen, ConnectTimeout: connectTimeout}
			if run != "" {
				re, err := regexp.Compile(run)
				if err != nil {
					return usagef("--run: %v", err)
				}
				if !slices.ContainsFunc(conformance.Cases(), re.MatchString) {
					return usagef("--run: %q matches no case (cases: %s)", run, strings.Join(conformance.Cases(), ", "))
				}
				cfg.Run = re
			}
			var agentEnv []string
			if secure {
				dir, err := os.MkdirTemp("", "reeve-conformance-certs-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				if cfg.ServerOptions, agentEnv, err = conformanceSecurity(dir); err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			suite, err := conformance.Listen(cfg)
			if err != nil {
				return err
			}
			defer suite.Close()

			var proc conformance.Process
			if len(args) > 0 {
				c, err := conformance.StartCommand(args, suite.Addr(), cmd.ErrOrStderr(), agentEnv...)
				if err != nil {
					return err
				}
				defer c.Close(5 * time.Second)
				proc = c
			} else {
				fmt.Fprintf(cmd.ErrOrStderr(), "reeve conformance: serving the agent protocol on %s; start the agent with REEVE_ADDRESS=%s %s(waiting %v)\n",
					suite.Addr(), suite.Addr(), strings.Join(append(agentEnv, ""), " "), connectTimeout)
			}
			rep := suite.Run(ctx, proc)
			if err := printReport(cmd, g, rep); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted")
			}
			if !rep.Passed {
				return exitCodeError{exitError}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "address the suite serves the agent protocol on; port 0 picks a free one")
	cmd.Flags().StringVar(&run, "run", "", "run only the cases whose name matches this regular expression (cases: "+strings.Join(conformance.Cases(), ", ")+")")
	cmd.Flags().StringVar(&agent, "agent", "", "the agent's command line, run by sh (instead of -- AGENT-COMMAND [ARG...])")
	cmd.Flags().DurationVar(&connectTimeout, "connect-timeout", 60*time.Second, "how long to wait for the agent's first connection")
	cmd.Flags().BoolVar(&secure, "secure", false, "serve mutual TLS with role checks; the agent gets an agent certificate through REEVE_TLS_CA, REEVE_TLS_CERT and REEVE_TLS_KEY")
	cmd.AddCommand(newConformanceAgentCmd(g))
	return cmd
}

// shellAgent runs a command line in the background of a shell that passes
// SIGTERM and SIGINT on to it and exits with its status: the shutdown case
// then judges the agent, not the shell (which would die of the SIGTERM).
func shellAgent(line string) []string {
	return []string{"sh", "-c", "{ " + line + "\n} & p=$!; trap 'kill -TERM $p 2>/dev/null' TERM INT; " +
		"wait $p; s=$?; if [ $s -gt 128 ]; then wait $p; s=$?; fi; exit $s"}
}

func printReport(cmd *cobra.Command, g *globals, rep *conformance.Report) error {
	if g.output == "json" {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteTable(cmd.OutOrStdout())
}

// newConformanceAgentCmd runs the Go SDK's reference agent for the
// conformance step type: what `reeve conformance` checks the SDK with.
func newConformanceAgentCmd(g *globals) *cobra.Command {
	var id string
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run a Go SDK agent that serves the conformance step type (to check the SDK)",
		Long: `agent connects to --address (env REEVE_ADDRESS, which reeve conformance sets
for the command it starts) with the Go SDK and serves the step type "` + conformance.StepType + `"
until SIGINT or SIGTERM, then shuts down gracefully.`,
		Example: `  reeve conformance -- reeve conformance agent`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts := []agentsdk.Option{agentsdk.WithNamespace(g.namespace), agentsdk.WithLogger(slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)))}
			if id != "" {
				opts = append(opts, agentsdk.WithAgentID(id))
			}
			tlsCfg, err := g.sec.tlsConfig()
			if err != nil {
				return err
			}
			if tlsCfg != nil {
				opts = append(opts, agentsdk.WithTLS(tlsCfg))
			}
			if g.sec.token != "" {
				opts = append(opts, agentsdk.WithToken(g.sec.token))
			}
			a, err := agentsdk.New([]string{g.address}, opts...)
			if err != nil {
				return err
			}
			conformance.Handle(a)
			return a.Run(ctx)
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "agent id (default <hostname>-<pid>-<random>)")
	return cmd
}

// conformanceSecurity makes the certificates of a secure conformance run in
// dir and returns the suite's server options (mutual TLS, role checks) and
// the agent's environment.
func conformanceSecurity(dir string) ([]grpc.ServerOption, []string, error) {
	agentGrant := auth.Grant{Role: auth.RoleAgent, Namespace: auth.AllNamespaces}.URI()
	if _, err := tlsconfig.Init(dir, []tlsconfig.CertSpec{{Name: "server", Server: true}, {Name: "agent", URIs: []*url.URL{agentGrant}}}, tlsconfig.InitOptions{}); err != nil {
		return nil, nil, err
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	srv, err := tlsconfig.Server(tlsconfig.Files{CA: p("ca.pem"), Cert: p("server.pem"), Key: p("server-key.pem")}, true)
	if err != nil {
		return nil, nil, err
	}
	opts := append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(srv))}, auth.New(auth.Config{Certificates: true}).ServerOptions()...)
	env := []string{"REEVE_TLS_CA=" + p("ca.pem"), "REEVE_TLS_CERT=" + p("agent.pem"), "REEVE_TLS_KEY=" + p("agent-key.pem")}
	return opts, env, nil
}
