package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/reeve-org/reeve/internal/cluster"
	"github.com/reeve-org/reeve/internal/demo"
)

// clusterFlags are the flags of the commands that start a local cluster.
type clusterFlags struct {
	dir, etcdBin, toxiproxyBin                   string
	etcdMembers, schedulers, supervisors, agents int
	grace                                        time.Duration
	secure                                       bool
}

func (f *clusterFlags) register(cmd *cobra.Command, agents int) {
	cmd.Flags().StringVar(&f.dir, "dir", "", "directory for data and logs (default a new temporary directory, kept)")
	cmd.Flags().StringVar(&f.etcdBin, "etcd-bin", "etcd", "etcd server binary (make etcd installs v3.7.3 in .tools/bin)")
	cmd.Flags().StringVar(&f.toxiproxyBin, "toxiproxy-bin", "", "toxiproxy-server binary: when set, agents reach schedulers and components reach etcd through toxiproxy")
	cmd.Flags().IntVar(&f.etcdMembers, "etcd-members", 3, "etcd members (odd)")
	cmd.Flags().IntVar(&f.schedulers, "schedulers", 2, "scheduler processes")
	cmd.Flags().IntVar(&f.supervisors, "supervisors", 2, "supervisor processes")
	cmd.Flags().IntVar(&f.agents, "agents", agents, "agent processes")
	cmd.Flags().DurationVar(&f.grace, "stop-grace", 15*time.Second, "on stop, how long each process has after SIGTERM before SIGKILL")
	cmd.Flags().BoolVar(&f.secure, "secure", false, "mutual TLS with role checks everywhere (etcd client and peer URLs too): a CA and a certificate per role in <dir>/certs, kept across runs")
}

// config resolves binaries and the directory.
func (f *clusterFlags) config() (cluster.Config, error) {
	self, err := os.Executable()
	if err != nil {
		return cluster.Config{}, err
	}
	etcd, err := exec.LookPath(f.etcdBin)
	if err != nil {
		return cluster.Config{}, usagef("--etcd-bin: %v (run 'make etcd')", err)
	}
	cfg := cluster.Config{Reeve: self, Etcd: etcd, Dir: f.dir,
		EtcdMembers: f.etcdMembers, Schedulers: f.schedulers, Supervisors: f.supervisors, Agents: f.agents, Secure: f.secure}
	if f.toxiproxyBin != "" {
		if cfg.Toxiproxy, err = exec.LookPath(f.toxiproxyBin); err != nil {
			return cluster.Config{}, usagef("--toxiproxy-bin: %v (run 'make toxiproxy')", err)
		}
	}
	if cfg.Dir == "" {
		if cfg.Dir, err = os.MkdirTemp("", "reeve-cluster-"); err != nil {
			return cluster.Config{}, err
		}
	}
	if f.etcdMembers < 1 || f.etcdMembers%2 == 0 {
		return cluster.Config{}, usagef("--etcd-members: want an odd number, got %d", f.etcdMembers)
	}
	if f.schedulers < 1 {
		return cluster.Config{}, usagef("--schedulers: want at least 1, got %d", f.schedulers)
	}
	if f.supervisors < 0 || f.agents < 0 {
		return cluster.Config{}, usagef("--supervisors, --agents: must not be negative")
	}
	return cfg, nil
}

func newClusterCmd() *cobra.Command {
	var f clusterFlags
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Run a local cluster as separate processes: 3 etcd members, 2 schedulers, 2 supervisors, demo agents",
		Long: `cluster starts, as separate OS processes on 127.0.0.1, an etcd cluster (the
official etcd binary, --etcd-bin), schedulers ('reeve scheduler'), supervisors
('reeve supervisor') and demo agents ('reeve agent --demo'), prints their
addresses, and runs until Ctrl-C or SIGTERM. Then it stops them in order
(agents, supervisors, schedulers, etcd), each with SIGTERM and after
--stop-grace with SIGKILL. Data and logs stay in --dir (logs/<name>.log).

Point the CLI at all schedulers with --address a,b: requests spread over them.

With --secure it runs as production does: a local CA and a certificate per
role in <dir>/certs, etcd members requiring client certificates (client and
peer URLs), schedulers serving mutual TLS with role checks, supervisors and
agents presenting their role's certificate; the demo workflows are registered
as admin (the agent role may not). It prints the environment a shell needs to
call the schedulers as admin.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.config()
			if err != nil {
				return err
			}
			cfg.AgentArgs = func(int) []string { return []string{"--demo"} }
			cfg.Workflows = demo.Workflows()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			c, err := cluster.Start(ctx, cfg)
			if err != nil {
				return err
			}
			printCluster(cmd, c)
			<-ctx.Done()
			fmt.Fprintln(cmd.OutOrStdout(), "stopping...")
			if err := c.Stop(f.grace); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "stopped; data and logs in %s\n", c.Dir())
			return nil
		},
	}
	f.register(cmd, 3)
	return cmd
}

func printCluster(cmd *cobra.Command, c *cluster.Cluster) {
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PROCESS\tPID\tADDRESS")
	for _, group := range [][]*cluster.Process{c.Etcd, c.Schedulers, c.Supervisors, c.Agents} {
		for _, p := range group {
			fmt.Fprintf(w, "%s\t%d\t%s\n", p.Name, p.Pid(), p.Addr)
		}
	}
	if c.ToxiproxyServer != nil {
		fmt.Fprintf(w, "%s\t%d\t%s\n", c.ToxiproxyServer.Name, c.ToxiproxyServer.Pid(), c.ToxiproxyServer.Addr)
	}
	_ = w.Flush()
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "\netcd endpoints:  %s\n", strings.Join(c.EtcdEndpoints, ","))
	fmt.Fprintf(out, "schedulers:      %s\n", strings.Join(c.SchedulerAddrs, ","))
	fmt.Fprintf(out, "data and logs:   %s\n", c.Dir())
	etcdctl := ""
	if c.Secure() {
		admin, etcdCli := c.Files(cluster.Admin), c.Files(cluster.EtcdClient)
		fmt.Fprintf(out, "certificates:    %s (mutual TLS with role checks)\n\n", c.CertDir())
		fmt.Fprintf(out, "as an operator (admin), in another shell:\n  export REEVE_TLS_CA=%s REEVE_TLS_CERT=%s REEVE_TLS_KEY=%s\n", admin.CA, admin.Cert, admin.Key)
		etcdctl = fmt.Sprintf(" --cacert %s --cert %s --key %s", etcdCli.CA, etcdCli.Cert, etcdCli.Key)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "try:  reeve --address %s task submit --workflow demo.orders --input '{\"order_id\":\"o-1\"}' --wait\n", strings.Join(c.SchedulerAddrs, ","))
	fmt.Fprintf(out, "      etcdctl --endpoints %s%s endpoint status -w table\n", strings.Join(c.EtcdEndpoints, ","), etcdctl)
	fmt.Fprintln(out, "Ctrl-C stops everything.")
}
