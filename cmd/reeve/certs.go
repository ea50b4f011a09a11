package main

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/reeve-org/reeve/agentsdk"
	"github.com/reeve-org/reeve/internal/auth"
	"github.com/reeve-org/reeve/internal/dial"
	"github.com/reeve-org/reeve/internal/etcdserver"
	"github.com/reeve-org/reeve/internal/tlsconfig"
	"github.com/reeve-org/reeve/internal/workflow"
)

func newCertsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Create a local CA, certificates and tokens for trying the secure mode",
	}
	cmd.AddCommand(newCertsInitCmd(), newCertsTokenCmd(), newCertsRenewCmd(), newCertsRevokeCmd())
	return cmd
}

// certSpecs are the certificates `certs init` and `dev --secure` issue.
func certSpecs(ns string) []tlsconfig.CertSpec {
	grant := func(r auth.Role, ns string) []*url.URL { return []*url.URL{auth.Grant{Role: r, Namespace: ns}.URI()} }
	return []tlsconfig.CertSpec{
		{Name: "server", Server: true},
		{Name: "admin", URIs: grant(auth.RoleAdmin, auth.AllNamespaces)},
		{Name: "supervisor", URIs: grant(auth.RoleSupervisor, auth.AllNamespaces)},
		{Name: "agent", URIs: grant(auth.RoleAgent, ns)},
		{Name: "client", URIs: grant(auth.RoleClient, ns)},
		{Name: "etcd-client"},
	}
}

func newCertsInitCmd() *cobra.Command {
	var (
		dir, ns  string
		hosts    []string
		validity time.Duration
		force    bool
	)
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create a local CA and server and per-role client certificates in --dir",
		Long: `init creates, in --dir:
  ca.pem, ca-key.pem                    a local certificate authority
  server.pem, server-key.pem            scheduler (and etcd) server certificate for --hosts
  admin.pem, admin-key.pem              client certificate with grant reeve://admin/*
  supervisor.pem, supervisor-key.pem    reeve://supervisor/*
  agent.pem, agent-key.pem              reeve://agent/<namespace>
  client.pem, client-key.pem            reeve://client/<namespace>
  etcd-client.pem, etcd-client-key.pem  client certificate for etcd
For development and trials; use your own PKI in production (docs/security.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usagef("--dir: required")
			}
			if err := workflow.ValidateNamespace("--namespace", ns); err != nil || ns == "" {
				return usagef("--namespace: %q is not a namespace", ns)
			}
			files, err := tlsconfig.Init(dir, certSpecs(ns), tlsconfig.InitOptions{Hosts: hosts, Validity: validity, Force: force})
			if errors.Is(err, tlsconfig.ErrExists) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			for _, f := range files {
				fmt.Fprintln(cmd.OutOrStdout(), f)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory to write to (created when missing)")
	cmd.Flags().StringVarP(&ns, "namespace", "n", "default", "namespace of the agent and client certificates")
	cmd.Flags().StringSliceVar(&hosts, "hosts", []string{"localhost", "127.0.0.1", "::1"}, "DNS names and IPs of the server certificate")
	cmd.Flags().DurationVar(&validity, "validity", 365*24*time.Hour, "how long the certificates are valid")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite existing files")
	return cmd
}

func newCertsTokenCmd() *cobra.Command {
	var (
		name   string
		grants []string
	)
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Print a new random bearer token and the tokens-file entry for it",
		Long: `token prints a random token on the first line (give it to the caller, e.g. as
REEVE_TOKEN) and then a tokens file holding only its SHA-256 digest and its
grants (merge its entry into the scheduler's --tokens-file), e.g.
  reeve certs token --name ci --grant reeve://client/payments`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return usagef("--name: required")
			}
			if len(grants) == 0 {
				return usagef("--grant: at least one required, e.g. reeve://client/default")
			}
			var gs []auth.Grant
			for _, s := range grants {
				g, err := auth.ParseGrant(s)
				if err != nil {
					return usagef("--grant: %v", err)
				}
				gs = append(gs, g)
			}
			tok, entry, err := auth.NewToken(name, gs)
			if err != nil {
				return err
			}
			b, err := auth.MarshalTokensFile([]auth.TokenEntry{entry})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n%s\n", tok, b)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "name of the token's holder (logs, rate limits)")
	cmd.Flags().StringArrayVar(&grants, "grant", nil, "grant URI, repeatable: reeve://<client|agent|supervisor|admin>/<namespace|*>[?step_types=a,b*&agent_ids=x*]")
	return cmd
}

// devSec is how `reeve dev` secures itself and its in-process components.
type devSec struct {
	dir        string
	etcdTLS    *etcdserver.ClientTLS
	supervisor dial.Config // its Address is set where it is used
	agentOpts  []agentsdk.Option
	// consoleToken is the admin token dev made at start for its console's
	// one-time sign-in; it lives in memory only and ends with the process.
	consoleToken string
}

// devSecurity prepares `reeve dev`: plaintext, or with --secure the
// certificates under <data-dir>/certs, created on first use.
func devSecurity(cmd *cobra.Command, g *globals, srv *serverSecurity, dataDir string, secure bool) (devSec, error) {
	if !secure {
		for _, f := range []string{"tls-cert", "tls-key", "tls-client-ca", "tls-crl", "tokens-file"} {
			if cmd.Flags().Changed(f) {
				return devSec{}, usagef("--%s: reeve dev sets up TLS itself: use --secure", f)
			}
		}
		// The same settings from the environment (e.g. a shell set up as a
		// client of a secure dev server) do not apply to a plaintext dev.
		g.sec.cert, g.sec.key, srv.clientCA, srv.crl, srv.tokensFile = "", "", "", "", ""
		return devSec{}, nil
	}
	dir, err := filepath.Abs(filepath.Join(dataDir, "certs"))
	if err != nil {
		return devSec{}, err
	}
	path := func(n string) string { return filepath.Join(dir, n) }
	if _, err := os.Stat(path("ca.pem")); errors.Is(err, os.ErrNotExist) {
		if _, err := tlsconfig.Init(dir, certSpecs(workflow.DefaultNamespace), tlsconfig.InitOptions{}); err != nil {
			return devSec{}, fmt.Errorf("create certificates: %w", err)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "reeve dev: created a local CA and certificates in %s\n", dir)
	}
	g.sec.cert, g.sec.key = path("server.pem"), path("server-key.pem")
	srv.clientCA = path("ca.pem")
	if srv.crl == "" {
		// An empty list to start with, so that `reeve certs revoke --dir`
		// and a SIGHUP revoke without a restart.
		if _, err := os.Stat(path("crl.pem")); errors.Is(err, os.ErrNotExist) {
			if _, err := tlsconfig.Revoke(tlsconfig.Files{Cert: path("ca.pem"), Key: path("ca-key.pem")}, path("crl.pem"), nil, time.Now()); err != nil {
				return devSec{}, fmt.Errorf("create the CRL: %w", err)
			}
		}
		srv.crl = path("crl.pem")
	}
	agentCfg, err := tlsconfig.Client(tlsconfig.Files{CA: path("ca.pem"), Cert: path("agent.pem"), Key: path("agent-key.pem")}, "localhost")
	if err != nil {
		return devSec{}, err
	}
	consoleToken, err := devConsoleToken(srv)
	if err != nil {
		return devSec{}, err
	}
	return devSec{
		consoleToken: consoleToken,
		dir:          dir,
		etcdTLS:      &etcdserver.ClientTLS{CertFile: path("server.pem"), KeyFile: path("server-key.pem"), TrustedCAFile: path("ca.pem")},
		supervisor:   dial.Config{CA: path("ca.pem"), Cert: path("supervisor.pem"), Key: path("supervisor-key.pem"), ServerName: "localhost"},
		agentOpts:    []agentsdk.Option{agentsdk.WithTLS(agentCfg)},
	}, nil
}

// devConsoleToken makes the admin token (of every namespace) of dev's
// console and adds it to srv's tokens, in memory only: a browser gets it
// through the console's one-time sign-in link, never in a file or on screen.
func devConsoleToken(srv *serverSecurity) (string, error) {
	g, err := auth.ParseGrant("reeve://admin/*")
	if err != nil {
		return "", err
	}
	tok, entry, err := auth.NewToken("dev-console", []auth.Grant{g})
	if err != nil {
		return "", fmt.Errorf("make the console's token: %w", err)
	}
	b, err := auth.MarshalTokensFile([]auth.TokenEntry{entry})
	if err != nil {
		return "", err
	}
	if srv.devTokens, err = auth.ParseTokens(b); err != nil {
		return "", err
	}
	return tok, nil
}

// printEnv prints what a shell needs to talk to the secure dev server as admin.
func (d devSec) printEnv(w io.Writer, addr string) {
	p := func(n string) string { return filepath.Join(d.dir, n) }
	fmt.Fprintf(w, "reeve dev: mutual TLS is on. As an operator (admin), in another shell:\n  %s\n",
		strings.Join([]string{
			"export REEVE_ADDRESS=" + addr,
			"REEVE_TLS_CA=" + p("ca.pem"),
			"REEVE_TLS_CERT=" + p("admin.pem"),
			"REEVE_TLS_KEY=" + p("admin-key.pem"),
		}, " "))
	fmt.Fprintf(w, "  (client.pem and agent.pem act as a client and an agent of namespace default; etcdctl: --cacert %s --cert %s --key %s)\n",
		p("ca.pem"), p("etcd-client.pem"), p("etcd-client-key.pem"))
}
