package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/reeve-org/reeve/internal/console"
	"github.com/reeve-org/reeve/internal/dial"
	"github.com/reeve-org/reeve/internal/telemetry"
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
// the schedulers of sched: plaintext (no sign-in), or over TLS with a
// sign-in and a bearer token per browser session (sched.Token is not used).
// It prints the URL to out, and with a signInToken (reeve dev --secure) a
// one-time sign-in link that signs a browser in with that token. wait
// blocks until the console has shut down after ctx ended.
func startConsole(ctx context.Context, log *slog.Logger, out io.Writer, listen string, sched dial.Config, readOnly bool, signInToken string) (wait func(), err error) {
	sched.Token = "" // each browser brings its own
	cc, err := dial.Schedulers(sched, telemetry.ClientHandler())
	if err != nil {
		return nil, fmt.Errorf("console: %w", dialUsage(err, "--address"))
	}
	opts := []console.Option{console.WithLogger(log.With("component", "console")), console.WithSecure(sched.UsesTLS()), console.WithReadOnly(readOnly)}
	var code string
	if signInToken != "" && sched.UsesTLS() {
		code = rand.Text()
		opts = append(opts, console.WithOneTimeSignIn(code, signInToken))
	}
	srv, err := console.New(cc, opts...)
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
	if code != "" {
		fmt.Fprintf(out, "reeve console: sign in once as admin, without a token: http://%s/login/once?code=%s\n", lis.Addr(), code)
	}
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
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			wait, err := startConsole(ctx, log, cmd.OutOrStdout(), listen, g.sec.dialConfig(g.address), readOnly, "")
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
// --secure over TLS with a sign-in: a bearer token of --tokens-file, or
// the one-time link it prints, which signs one browser in with the admin
// token dev made at start (d.consoleToken).
func (d devSec) startConsole(ctx context.Context, log *slog.Logger, out io.Writer, con *consoleFlags, addr string) error {
	if con.listen == "" {
		return nil
	}
	sched := dial.Config{Address: loopback(addr)}
	if d.dir != "" {
		sched.CA, sched.ServerName = filepath.Join(d.dir, "ca.pem"), "localhost"
	}
	_, err := startConsole(ctx, log, out, con.listen, sched, con.readOnly, d.consoleToken)
	return err
}
