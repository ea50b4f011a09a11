#!/usr/bin/env bash
# Reproduces the figures of docs/benchmarks.md (`make bench`). Every run is
# bounded; results go to bench-results/<time>/, one JSON object per file.
# SOAK (default 180s) sets the length of the DB-size soak; SUSTAIN (default
# 60s) the length of the sustained 1-step run.
set -euo pipefail
cd "$(dirname "$0")/.."
SOAK=${SOAK:-180s}
SUSTAIN=${SUSTAIN:-60s}
out=bench-results/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
reeve=./bin/reeve

machine() {
	echo "date: $(date -u +%FT%TZ)"
	echo "cpus: $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
	echo "memory: $(grep MemTotal /proc/meminfo | awk '{print $2/1024/1024 " GiB"}')"
	echo "kernel: $(uname -r)"
	echo "go: $(go version)"
	echo "load: $(cut -d' ' -f1-3 /proc/loadavg); cpu pressure: $(head -1 /proc/pressure/cpu 2>/dev/null || echo n/a)"
}

# run NAME ARGS...: one `reeve bench` run, its JSON in $out/NAME.json.
run() {
	local name=$1
	shift
	echo "== $name: reeve bench $* -o json   [load $(cut -d' ' -f1 /proc/loadavg)]"
	"$reeve" bench "$@" -o json | tee "$out/$name.json" || echo "== $name FAILED (exit $?)" | tee -a "$out/failed.txt"
}

machine | tee "$out/machine.txt"

run raw-etcd --embedded --raw-etcd 50000 --concurrency 128
run contract --embedded --tasks 5000 --concurrency 128 --steps 1
run sustained-1step --embedded --tasks 10000000 --duration "$SUSTAIN" --concurrency 128 --steps 1 --retention 1m
run 3step-sequential --embedded --tasks 10000000 --duration 30s --concurrency 128 --steps 3
run 3step-fanout --embedded --tasks 10000000 --duration 30s --concurrency 128 --steps 3 --shape fanout
run open-loop-1000 --embedded --tasks 10000000 --duration 60s --rate 1000 --steps 1
# Recovery (issue 13): one expiry, then 1,000 and 10,000 steps whose agent
# goes silent or whose connection drops, all expiring together.
run recovery-1 --embedded --recovery --tasks 1
run recovery-1000 --embedded --recovery --tasks 1000
run recovery-10000 --embedded --recovery --tasks 10000

# Scheduler RSS with 10,000 steps in flight: `reeve dev` hosts etcd (and a
# supervisor; its own scheduler gets no agents), a separate `reeve scheduler`
# process serves the load, and agents hold each step 10 s at 1,000 tasks/s,
# so about 10,000 steps are running. --server-pid samples that scheduler.
data=$(mktemp -d)
"$reeve" dev --data-dir "$data" --listen 127.0.0.1:0 --console-listen 127.0.0.1:0 --etcd-listen 127.0.0.1:0 --log-level error >"$out/dev.out" 2>"$out/dev.err" &
dev=$!
sched=
cleanup() {
	[ -n "$sched" ] && kill -INT "$sched" 2>/dev/null && wait "$sched" 2>/dev/null || true
	kill -INT "$dev" 2>/dev/null && wait "$dev" 2>/dev/null || true
	rm -rf "$data"
}
trap cleanup EXIT
for _ in $(seq 100); do grep -q 'reeve dev:' "$out/dev.out" && break; sleep 0.1; done
etcd=$(sed -n 's/.*, etcd on \([^,]*\),.*/\1/p' "$out/dev.out")
[ -n "$etcd" ] || { echo "reeve dev did not start:" >&2; cat "$out/dev.out" "$out/dev.err" >&2; exit 1; }
"$reeve" scheduler --etcd-endpoints "$etcd" --listen 127.0.0.1:0 >"$out/scheduler.out" 2>"$out/scheduler.err" &
sched=$!
for _ in $(seq 100); do grep -q 'scheduler listening' "$out/scheduler.err" && break; sleep 0.1; done
addr=$(sed -n 's/.*msg="scheduler listening" address=\([0-9.:]*\).*/\1/p' "$out/scheduler.err")
[ -n "$addr" ] || { echo "reeve scheduler did not start:" >&2; cat "$out/scheduler.err" >&2; exit 1; }
run rss-10k-in-flight --address "$addr" --etcd-endpoints "$etcd" --server-pid "$sched" \
	--tasks 10000000 --duration 20s --rate 1000 --work 10s --agents 20 --agent-concurrency 1000
cleanup
trap - EXIT

# Flood (issue 12 defect 11): open loop at 1,000 tasks/s for 45 s, faster
# than the agents complete (2 × 100 steps held 500 ms: at most 400/s), against
# a 64 MiB quota; then the drain. Its "flood" object must show refusals,
# lost 0 and nospace_raised false.
run flood-64mib --embedded --quota-bytes 67108864 --space-check-interval 1s --space-reclaim-interval 10s \
	--tasks 10000000 --rate 1000 --duration 45s --work 500ms --agents 2 --agent-concurrency 100

run soak-1000 --embedded --tasks 10000000 --duration "$SOAK" --rate 1000 --steps 1 --retention 30s

echo "== Go benchmarks   [load $(cut -d' ' -f1 /proc/loadavg)]"
set +e # a failing benchmark must not hide the others
go test -run '^$' -bench 'BenchmarkTickWith100kLiveTasks|BenchmarkDetectionLatency' -benchtime 1x -timeout 20m ./supervisor/ | tee "$out/go-supervisor.txt"
go test -run '^$' -bench 'BenchmarkStepRoundTrip' -benchtime 20000x ./agentsdk/ | tee "$out/go-agentsdk.txt"
go test -run '^$' -bench . -benchtime 2s ./internal/store/ ./internal/taskstate/ ./scheduler/ | tee "$out/go-store-taskstate-scheduler.txt"
machine | tee -a "$out/machine.txt"
echo "results in $out"
