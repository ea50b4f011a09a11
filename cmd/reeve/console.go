package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/reeve-org/reeve/internal/console"
	"github.com/reeve-org/reeve/internal/telemetry"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

// consoleFlags are the web console's flags on dev and scheduler.
type consoleFlags struct {
	listen   string
	readOnly bool
}

func (f *consoleFlags) register(cmd *cobra.Command, def string) {
	cmd.Flags().StringVar(&f.listen, "console-listen", def, "address of the web console (HTTP); empty turns it off")
	cmd.Flags().BoolVar(&f.readOnly, "console-read-only", false, "the console shows but never changes anything (no operator actions, refused by the console server)")
}

// startConsole serves the console on listen until ctx ends, as a client of
// the scheduler at addr: plaintext when tlsCfg is nil (no sign-in), else TLS
// and a sign-in with a bearer token per browser session. It prints the URL
// to out. wait blocks until the console has shut down after ctx ended.
func startConsole(ctx context.Context, log *slog.Logger, out io.Writer, listen, addr string, tlsCfg *tls.Config, readOnly bool) (wait func(), err error) {
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), telemetry.ClientHandler())
	if err != nil {
		return nil, fmt.Errorf("console: scheduler address %q: %w", addr, err)
	}
	srv, err := console.New(cc, console.WithLogger(log.With("component", "console")), console.WithSecure(tlsCfg != nil), console.WithReadOnly(readOnly))
	if err != nil {
		_ = cc.Close()
		return nil, err
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		_ = cc.Close()
		return nil, fmt.Errorf("--console-listen: %w", err)
	}
	fmt.Fprintf(out, "reeve console: http://%s/\n", lis.Addr())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cc.Close()
		if err := srv.Serve(ctx, lis); err != nil {
			log.Error("console stopped", "err", err)
		}
	}()
	return func() { <-done }, nil
}

func newConsoleCmd(g *globals) *cobra.Command {
	var (
		listen   string
		readOnly bool
		logs     logFlags
	)
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console in front of a scheduler (--address)",
		Long: `console serves the web console on --listen as a client of the scheduler at
--address. Over TLS (--tls-ca or --tls) every browser signs in with a bearer
token, which the console sends with each of its calls: the scheduler's roles
decide what the browser sees and may do. --tls-cert/--tls-key, when given, are
presented to a scheduler that requires client certificates; --token is not
used (each browser brings its own). See docs/console.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger(cmd)
			if err != nil {
				return usageError{err}
			}
			addrs := splitAddrs(g.address)
			if len(addrs) != 1 {
				return usagef("--address: want one scheduler host:port, got %q", g.address)
			}
			sec := g.sec
			sec.token = ""
			tlsCfg, err := sec.tlsConfig()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			wait, err := startConsole(ctx, log, cmd.OutOrStdout(), listen, addrs[0], tlsCfg, readOnly)
			if err != nil {
				return err
			}
			<-ctx.Done()
			wait()
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8233", "address the console listens on (HTTP; put a TLS proxy in front beyond loopback)")
	cmd.Flags().BoolVar(&readOnly, "read-only", false, "show but never change anything: no operator actions")
	logs.register(cmd)
	return cmd
}

// loopback turns a wildcard listen address (0.0.0.0:7430, [::]:7430) into
// one the process can dial.
func loopback(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// startConsole starts the console of `reeve dev`: plaintext, or with
// --secure over TLS with a sign-in, which needs --tokens-file (the dev
// server otherwise admits client certificates only, which a browser session
// does not have).
func (d devSec) startConsole(ctx context.Context, log *slog.Logger, out io.Writer, con *consoleFlags, srv *serverSecurity, addr string) error {
	if con.listen == "" {
		return nil
	}
	var tlsCfg *tls.Config
	if d.dir != "" {
		if srv.tokensFile == "" {
			fmt.Fprintln(out, "reeve dev: the console is off: with --secure it signs browsers in with bearer tokens; add --tokens-file (see docs/console.md)")
			return nil
		}
		cfg, err := tlsconfig.Client(tlsconfig.Files{CA: filepath.Join(d.dir, "ca.pem")}, "localhost")
		if err != nil {
			return fmt.Errorf("console: %w", err)
		}
		tlsCfg = cfg
	}
	_, err := startConsole(ctx, log, out, con.listen, loopback(addr), tlsCfg, con.readOnly)
	return err
}
