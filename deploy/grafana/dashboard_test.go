// Package grafana_test checks the Grafana dashboard reeve.json against a
// running Reeve: every metric and label its queries use must exist in the
// /metrics of `reeve dev --demo` after demo tasks ran, so that no panel
// stays empty because of a renamed or missing metric.
package grafana_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

type dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func load(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("reeve.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("reeve.json: %v", err)
	}
	return d
}

var (
	quoted   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	matchers = regexp.MustCompile(`\{[^}]*\}`)
	grouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	ranges   = regexp.MustCompile(`\[[^\]]*\]`)
	ident    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	labelIn  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
)

// promqlKeywords are the aggregations, functions and keywords the
// dashboard uses, which look like identifiers but are not metrics.
var promqlKeywords = map[string]bool{
	"sum": true, "max": true, "min": true, "avg": true, "count": true, "rate": true, "increase": true,
	"histogram_quantile": true, "by": true, "without": true, "on": true, "ignoring": true, "and": true, "or": true, "unless": true,
}

// refs returns the metric names and the label names a PromQL expression
// uses. It is a small scanner, not a PromQL parser: enough for the
// dashboard's queries, and TestScannerFindsMetrics keeps it honest.
func refs(expr string) (metrics, labels []string) {
	for _, m := range matchers.FindAllString(quoted.ReplaceAllString(expr, `""`), -1) {
		for _, l := range labelIn.FindAllStringSubmatch(m, -1) {
			labels = append(labels, l[1])
		}
	}
	for _, g := range grouping.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
	}
	rest := quoted.ReplaceAllString(expr, `""`)
	rest = matchers.ReplaceAllString(rest, " ")
	rest = grouping.ReplaceAllString(rest, " ")
	rest = ranges.ReplaceAllString(rest, " ")
	for _, loc := range ident.FindAllStringIndex(rest, -1) {
		name := rest[loc[0]:loc[1]]
		next := strings.TrimLeft(rest[loc[1]:], " ")
		if promqlKeywords[name] || strings.HasPrefix(next, "(") || (loc[0] > 0 && rest[loc[0]-1] == '$') {
			continue
		}
		metrics = append(metrics, name)
	}
	return metrics, labels
}

func TestScannerFindsMetrics(t *testing.T) {
	m, l := refs(`histogram_quantile(0.99, sum by (le, reeve_step_type) (rate(reeve_step_queue_wait_seconds_bucket{reeve_namespace=~"$namespace"}[$__rate_interval]))) / max(reeve_x)`)
	if !slices.Equal(m, []string{"reeve_step_queue_wait_seconds_bucket", "reeve_x"}) {
		t.Errorf("metrics %q", m)
	}
	if !slices.Equal(l, []string{"reeve_namespace", "le", "reeve_step_type"}) {
		t.Errorf("labels %q", l)
	}
}

// The panels the dashboard promises (issue 16): each of these metrics is
// queried by some panel.
var promised = []string{
	"reeve_tasks_completed_total", "reeve_tasks_failed_total", "reeve_tasks_compensated_total", "reeve_tasks_canceled_total", // throughput by workflow and outcome
	"reeve_steps_queued", "reeve_steps_queued_oldest_age_seconds", // queue depth and oldest ready step per capability
	"reeve_steps_in_flight", "reeve_steps_overdue", "reeve_steps_overdue_oldest_age_seconds", // running, overdue, oldest overdue
	"reeve_supervisor_recoveries_total", "reeve_supervisor_leader", // recoveries by action, leader
	"reeve_etcd_txn_duration_seconds_bucket", "reeve_etcd_db_size_bytes", "reeve_etcd_db_size_in_use_bytes", // etcd latency and size
	"reeve_agents_connected", // agent connections
	// The archive's moves (issue 25): lag, tasks moved, write time.
	"reeve_archive_lag_seconds", "reeve_archive_tasks_total", "reeve_archive_write_time_seconds_bucket",
}

func TestDashboardShape(t *testing.T) {
	d := load(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both are needed to import and link it", d.UID, d.Title)
	}
	used := map[string]bool{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: data source must be the ${datasource} variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			ms, _ := refs(tg.Expr)
			if len(ms) == 0 {
				t.Errorf("panel %q: query %q uses no metric", p.Title, tg.Expr)
			}
			for _, m := range ms {
				used[m] = true
			}
		}
	}
	for _, m := range promised {
		if !used[m] {
			t.Errorf("no panel queries %s", m)
		}
	}
}

// TestDashboardMetricsExist starts `reeve dev --demo` (REEVE_BIN, or a
// binary built from ../../cmd/reeve) with its archive taking ended tasks at
// once (--archive-grace 0s), runs demo tasks, including one that the
// supervisor must recover, and checks every metric and label name of every
// query against its /metrics.
func TestDashboardMetricsExist(t *testing.T) {
	d := load(t)
	bin := os.Getenv("REEVE_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "reeve")
		cmd := exec.Command("go", "build", "-o", bin, "../../cmd/reeve")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Every listener on port 0: a `make run` (or anything else) holding a
	// default port must not make it exit.
	dev := exec.CommandContext(ctx, bin, "dev", "--demo", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0",
		"--etcd-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0",
		"--supervisor-tick", "200ms", "--archive-grace", "0s")
	dev.Cancel = func() error { return dev.Process.Signal(os.Interrupt) }
	dev.WaitDelay = 20 * time.Second
	out, err := dev.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	dev.Stderr = dev.Stdout
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	// Its whole output is kept in devLog (read once exited is closed), and
	// shown when the test failed.
	var devLog strings.Builder
	lines := make(chan string, 64)
	exited := make(chan struct{}) // its output ended: it exited
	go func() {
		defer close(exited)
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			devLog.WriteString(sc.Text() + "\n")
			select {
			case lines <- sc.Text():
			default: // nobody reads any more; drain
			}
		}
	}()
	defer func() {
		cancel()
		<-exited // all of its output read before Wait
		_ = dev.Wait()
		if t.Failed() {
			t.Logf("reeve dev's output:\n%s", devLog.String())
		}
	}()

	// The addresses come from its output: the metrics log line, then the
	// "scheduler and supervisor on ADDR" line.
	var metricsURL, addr string
	metricsRe := regexp.MustCompile(`metrics endpoint listening.*address=(\S+)`)
	addrRe := regexp.MustCompile(`scheduler and supervisor on (\S+)`)
	for addr == "" || metricsURL == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("reeve dev exited before it listened")
			}
			if m := metricsRe.FindStringSubmatch(l); m != nil {
				metricsURL = m[1]
			}
			if m := addrRe.FindStringSubmatch(l); m != nil {
				addr = m[1]
			}
		case <-ctx.Done():
			t.Fatal("reeve dev did not print its addresses within 2 minutes")
		}
	}

	// Tasks that end every way: succeeded, compensated, one whose silent
	// step the supervisor recovers, one that fails (a permanent error, no
	// compensation), one canceled while its step waits for an agent.
	reeve := func(args ...string) {
		t.Helper()
		c := exec.CommandContext(ctx, bin, append([]string{"--address", addr, "--timeout", "30s"}, args...)...)
		if o, err := c.CombinedOutput(); err != nil {
			t.Fatalf("reeve %v: %v\n%s", args, err, o)
		}
	}
	// The demo registers its workflows just after it listens.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		o, err := exec.CommandContext(ctx, bin, "--address", addr, "workflow", "get", "demo.timeout").CombinedOutput()
		if err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("reeve dev exited: %v\n%s", err, o)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo workflows not registered within 30s: %v\n%s", err, o)
		}
	}
	for _, wf := range []string{"demo.orders", "demo.compensate", "demo.timeout"} {
		reeve("task", "submit", "--workflow", wf, "--wait", "--exit-code=false")
	}
	dir := t.TempDir()
	failing := filepath.Join(dir, "fails.json")
	waiting := filepath.Join(dir, "waits.json")
	writeFile(t, failing, `{"name": "fails", "steps": [{"name": "ship", "type": "shipping.ship_fail", "timeout": "10s"}]}`)
	writeFile(t, waiting, `{"name": "waits", "steps": [{"name": "a", "type": "nobody.serves.this", "timeout": "10s"}]}`)
	reeve("task", "submit", "-f", failing, "--wait", "--exit-code=false")
	reeve("task", "submit", "-f", waiting, "--id", "to-cancel")
	reeve("task", "cancel", "to-cancel")

	var body string
	var missing []string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		body = scrape(t, metricsURL)
		missing = missingRefs(d, body)
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, m := range missing {
		t.Error(m)
	}
}

// missingRefs lists the metrics and labels of the dashboard's queries that
// body (a /metrics page) does not have. A label counts when some sample
// of the query's metrics carries it ("le" on histogram buckets).
func missingRefs(d dashboard, body string) []string {
	var missing []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			ms, ls := refs(tg.Expr)
			for _, m := range ms {
				if !strings.Contains(body, "\n"+m+"{") && !strings.Contains(body, "\n"+m+" ") {
					missing = append(missing, "panel "+p.Title+": metric "+m+" not in /metrics")
				}
			}
			for _, l := range ls {
				found := false
				for _, m := range ms {
					if regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m) + `\{[^}]*\b` + regexp.QuoteMeta(l) + `="`).MatchString(body) {
						found = true
					}
				}
				if !found {
					missing = append(missing, "panel "+p.Title+": label "+l+" on none of "+strings.Join(ms, ", "))
				}
			}
		}
	}
	return missing
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return "\n" + string(b)
}
