package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/reeve-org/reeve/internal/store"
	"github.com/reeve-org/reeve/internal/verify"
	"github.com/reeve-org/reeve/internal/workflow"
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
		arc       archiveFlags
		retention time.Duration
		slack     time.Duration
		expect    string
	)
	cmd := &cobra.Command{
		Use:   "verify --etcd-endpoints URLS [--prefix /reeve/] [-o json]",
		Short: "Check the invariants of Reeve's data in etcd; exit 1 on violations",
		Long: `verify reads Reeve's keys in etcd at one revision, in pages, and reports
every violation: index keys (ready, deadlines, states, ended) with no task
record or that disagree with what their record implies, keys a record implies
that are missing, terminal tasks with queued or dispatched steps, and
non-terminal tasks nothing will move (no queued step, no dispatched step with a
deadline). With --archive-dsn (the schedulers' archive), ended tasks still in
etcd long after they should have moved there (--archive-grace, --retention for
FAILED ones, plus --archive-slack); with --expect-tasks FILE (one task id or
namespace/id per line), every such task not found in etcd or the archive.
Records a newer Reeve wrote in a record version this one does not know (task
records, ready entries, workflows, alerts, agents) are listed as
record_of_unknown_version and not judged otherwise; a key layout newer than
this Reeve knows is refused. It never writes; it is safe on a live cluster.
Exit code 0: clean; 1: violations (or an error). See docs/reliability.md,
docs/archive.md and docs/operations.md ("Upgrades and rollbacks").`,
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
			opts := verify.Options{Prefix: prefix, PageSize: pageSize, ArchiveGrace: arc.grace, Retention: retention, Slack: slack}
			if expect != "" {
				if opts.Expect, err = readTaskRefs(expect); err != nil {
					return err
				}
			}
			st := store.New(cli, store.WithPrefix(prefix), store.WithRecordCache(0))
			tasks, closeArchive, err := arc.reader(ctx, st)
			if err != nil {
				return err
			}
			defer closeArchive()
			opts.Tasks = tasks
			rep, err := verify.Check(ctx, cli, opts)
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
	arc.register(cmd, g.getenv, "")
	_ = cmd.Flags().MarkHidden("archive-retention") // not checked
	cmd.Flags().DurationVar(&retention, "retention", 72*time.Hour, "the schedulers' --retention: how long FAILED tasks stay in etcd before they move to the archive")
	cmd.Flags().DurationVar(&slack, "archive-slack", 10*time.Minute, "with --archive-dsn: how much later than due an ended task still in etcd is a violation")
	cmd.Flags().StringVar(&expect, "expect-tasks", "", "file of task ids (id, or namespace/id, one per line) that must exist in etcd or the archive")
	return cmd
}

// readTaskRefs reads a file of task ids, one per line: "id" (namespace
// default) or "namespace/id"; blank lines and lines starting with # are
// skipped.
func readTaskRefs(path string) ([]verify.TaskRef, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--expect-tasks: %w", err)
	}
	var refs []verify.TaskRef
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		ns, id, ok := strings.Cut(line, "/")
		if !ok {
			ns, id = "default", line
		}
		if err := workflow.ValidateTaskID("task_id", id); err != nil {
			return nil, fmt.Errorf("--expect-tasks: %s:%d: %v", path, i+1, err)
		}
		refs = append(refs, verify.TaskRef{Namespace: ns, ID: id})
	}
	return refs, nil
}
