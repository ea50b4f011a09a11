package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/spf13/cobra"
)

// pprofFlag is the --pprof-listen flag of the server commands: Go's pprof
// endpoints on their own HTTP listener, off unless set.
type pprofFlag struct{ listen string }

func (f *pprofFlag) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.listen, "pprof-listen", "", "serve Go's pprof endpoints (/debug/pprof/) on this address, e.g. 127.0.0.1:6060; off when empty. Never expose it publicly")
}

// start serves pprof until ctx ends, when the flag is set. It returns the
// address it listens on ("" when off) and a stop function that waits for
// the server to end.
func (f *pprofFlag) start(ctx context.Context, log *slog.Logger) (addr string, stop func(), err error) {
	if f.listen == "" {
		return "", func() {}, nil
	}
	return startPprof(ctx, f.listen, log)
}

// startPprof serves the pprof handlers on listen (a dedicated mux: nothing
// else is exposed) until ctx ends or stop is called.
func startPprof(ctx context.Context, listen string, log *slog.Logger) (addr string, stop func(), err error) {
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return "", nil, usagef("--pprof-listen: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof server stopped", "err", err)
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		<-ctx.Done()
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer scancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close() // a CPU profile in progress
		}
	}()
	addr = lis.Addr().String()
	log.Info("pprof listening", "address", addr)
	return addr, func() { cancel(); <-done }, nil
}
