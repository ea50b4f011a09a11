package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/reeve-org/reeve/internal/verify"
)

// exitViolations is verify's exit code when it found violations.
const exitViolations = 1

func newVerifyCmd(g *globals) *cobra.Command {
	var (
		endpoints []string
		prefix    string
		pageSize  int
		timeout   time.Duration
		etcdSec   etcdSecurity
	)
	cmd := &cobra.Command{
		Use:   "verify --etcd-endpoints URLS [--prefix /reeve/] [-o json]",
		Short: "Check the invariants of Reeve's data in etcd; exit 1 on violations",
		Long: `verify reads Reeve's keys in etcd at one revision, in pages, and reports
every violation: index keys (ready, deadlines, states, ended) with no task
record or that disagree with what their record implies, keys a record implies
that are missing, terminal tasks with queued or dispatched steps, and
non-terminal tasks nothing will move (no queued step, no dispatched step with a
deadline). It never writes; it is safe on a live cluster. Exit code 0: clean;
1: violations (or an error). See docs/reliability.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(endpoints) == 0 {
				return usagef("--etcd-endpoints: required (or REEVE_ETCD_ENDPOINTS)")
			}
			if pageSize < 1 || pageSize > 10000 {
				return usagef("--page-size: %d is outside [1, 10000]", pageSize)
			}
			cli, err := etcdClient(endpoints, &etcdSec)
			if err != nil {
				return err
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			rep, err := verify.Check(ctx, cli, verify.Options{Prefix: prefix, PageSize: pageSize})
			if err != nil {
				return err
			}
			if g.output == "json" {
				err = rep.WriteJSON(cmd.OutOrStdout())
			} else {
				err = rep.WriteText(cmd.OutOrStdout())
			}
			if err != nil {
				return err
			}
			if !rep.OK() {
				fmt.Fprintf(cmd.ErrOrStderr(), "reeve verify: %d violations\n", len(rep.Violations))
				return exitCodeError{exitViolations}
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&endpoints, "etcd-endpoints", envList("REEVE_ETCD_ENDPOINTS"), "etcd client URLs, comma-separated (env REEVE_ETCD_ENDPOINTS)")
	cmd.Flags().StringVar(&prefix, "prefix", "/reeve/", "etcd key prefix (same as the schedulers')")
	cmd.Flags().IntVar(&pageSize, "page-size", 500, "keys per read (bounds memory)")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "give up after this long")
	etcdSec.register(cmd, g.getenv)
	return cmd
}
