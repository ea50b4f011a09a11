package cluster_test

import (
	"bufio"
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/cluster/clustertest"
)

// `reeve cluster` prints every process and stops them all on SIGINT,
// exiting 0.
func TestClusterCommandStopsEverythingOnInterrupt(t *testing.T) {
	reeve, etcd := clustertest.Reeve(t), clustertest.Tool(t, "etcd")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, reeve, "cluster", "--dir", t.TempDir(), "--etcd-bin", etcd, "--supervisors", "1", "--agents", "1", "--stop-grace", "15s")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	row := regexp.MustCompile(`^(etcd-\d|scheduler-\d|supervisor-\d|agent-\d)\s+(\d+)`)
	var pids []int
	for sc.Scan() {
		line := sc.Text()
		if m := row.FindStringSubmatch(line); m != nil {
			pid, _ := strconv.Atoi(m[2])
			pids = append(pids, pid)
		}
		if strings.HasPrefix(line, "Ctrl-C stops everything") {
			break
		}
	}
	if len(pids) != 3+2+1+1 {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("listed %d processes, want 7; stderr: %s", len(pids), stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var rest strings.Builder
	for sc.Scan() {
		rest.WriteString(sc.Text() + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("reeve cluster: %v\nstdout: %s\nstderr: %s", err, rest.String(), stderr.String())
	}
	if !strings.Contains(rest.String(), "stopped; data and logs in") {
		t.Errorf("stdout after SIGINT: %q", rest.String())
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d still running after reeve cluster exited", pid)
		}
	}
}
