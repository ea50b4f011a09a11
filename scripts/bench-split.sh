#!/usr/bin/env bash
# bench-split.sh runs `reeve bench` against etcd and a scheduler in processes
# of their own, as in production, and prints the scheduler's and etcd's CPU
# per completed task separately (docs/benchmarks.md, "Issue 15, fifth
# pass"). The arguments are bench's load flags, e.g.
#
#   scripts/bench-split.sh --tasks 10000000 --duration 15s --concurrency 128 --steps 1
#   scripts/bench-split.sh --tasks 10000000 --duration 20s --rate 1000 --steps 1
#
# Needs `make build` (bin/reeve) and `make etcd` (.tools/bin/etcd). The
# scheduler runs with its defaults (GC percentage 100) plus SCHEDULER_FLAGS
# (e.g. SCHEDULER_FLAGS='--commit-window 3ms'); the load generator
# and the agents run in the bench process and are not counted.
set -euo pipefail
cd "$(dirname "$0")/.."
reeve=${REEVE:-bin/reeve}
etcd=${ETCD:-.tools/bin/etcd}
dir=$(mktemp -d)
etcd_port=${ETCD_PORT:-23791}
sched_addr=${SCHEDULER_ADDR:-127.0.0.1:0} # port 0: read from its log
pids=()
cleanup() {
	local status=$?
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [ "$status" -ne 0 ]; then
		for f in "$dir"/*.log; do
			[ -f "$f" ] || continue
			echo "--- $f" >&2
			tail -n 40 "$f" >&2
		done
	fi
	rm -rf "$dir"
}
trap cleanup EXIT

"$etcd" --data-dir "$dir/etcd" --log-level error \
	--listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
	--listen-peer-urls "http://127.0.0.1:$((etcd_port + 10))" --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 10))" \
	--initial-cluster "default=http://127.0.0.1:$((etcd_port + 10))" \
	--listen-metrics-urls "http://127.0.0.1:$((etcd_port + 20))" \
	--auto-compaction-mode periodic --auto-compaction-retention 1m >"$dir/etcd.log" 2>&1 &
etcd_pid=$!
pids+=("$etcd_pid")
for _ in $(seq 100); do
	curl -fs "http://127.0.0.1:$etcd_port/health" >/dev/null 2>&1 && break
	sleep 0.1
done
# shellcheck disable=SC2086 # SCHEDULER_FLAGS is a list of flags
"$reeve" scheduler --etcd-endpoints "http://127.0.0.1:$etcd_port" --listen "$sched_addr" ${SCHEDULER_FLAGS:-} >"$dir/scheduler.log" 2>&1 &
sched_pid=$!
pids+=("$sched_pid")
for _ in $(seq 100); do
	grep -q "scheduler listening" "$dir/scheduler.log" 2>/dev/null && break
	sleep 0.1
done
sched_addr=$(sed -n 's/.*msg="scheduler listening" address=\([0-9.:]*\).*/\1/p' "$dir/scheduler.log")
[ -n "$sched_addr" ] || { echo "reeve scheduler did not start" >&2; exit 1; }

cpu() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat"; }
metrics() { curl -fs "http://127.0.0.1:$((etcd_port + 20))/metrics" >"$1"; }
etcd0=$(cpu "$etcd_pid")
metrics "$dir/m0"
"$reeve" bench --address "$sched_addr" --etcd-endpoints "http://127.0.0.1:$etcd_port" --server-pid "$sched_pid" "$@" -o json >"$dir/out.json"
etcd1=$(cpu "$etcd_pid")
metrics "$dir/m1"
python3 - "$dir/out.json" "$etcd0" "$etcd1" "$dir/m0" "$dir/m1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
n = max(1, d["completed"])
etcd = float(sys.argv[3]) - float(sys.argv[2])

def metric(path, name):
    for line in open(path):
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0

def delta(name):
    return metric(sys.argv[5], name) - metric(sys.argv[4], name)

fsyncs = delta("etcd_disk_wal_fsync_duration_seconds_count")
commits = delta("etcd_disk_backend_commit_duration_seconds_count")
print(json.dumps({
    "tasks_per_sec": round(d["tasks_per_sec"]),
    "p50_ms": round(d["p50_ms"], 1), "p99_ms": round(d["p99_ms"], 1),
    "scheduler_cpu_us_per_task": round(d.get("server_cpu_sec", 0) / n * 1e6),
    "etcd_cpu_us_per_task": round(etcd / n * 1e6),
    "scheduler_peak_rss_mb": d.get("server_peak_rss_mb"),
    "etcd_txns_per_task": round(d.get("etcd_txns_per_task", 0), 3),
    "etcd_bytes_per_task": round(d.get("etcd_bytes_per_task", 0)),
    "etcd_ops_per_task": round(d.get("etcd_ops_per_task", 0), 2),
    "etcd_wal_fsyncs_per_task": round(fsyncs / n, 3),
    "etcd_wal_fsync_mean_ms": round(delta("etcd_disk_wal_fsync_duration_seconds_sum") / max(1, fsyncs) * 1e3, 2),
    "etcd_wal_fsync_busy": round(delta("etcd_disk_wal_fsync_duration_seconds_sum") / max(1e-9, d["duration_sec"]), 2),
    "etcd_backend_commit_mean_ms": round(delta("etcd_disk_backend_commit_duration_seconds_sum") / max(1, commits) * 1e3, 2),
    "windows_p99_ms": [round(w.get("p99_ms", 0)) for w in d.get("windows", [])],
}))
EOF
