#!/usr/bin/env bash
# Issue 26 on a machine lent for it, in one call per part:
#   overload  part 1: admitted latency and refusals at 1.5x capacity with the
#             default shedding, a 10 ms write target, the run-queue (CPU)
#             target and none; then 0.8x (about 5 minutes)
#   recovery  part 3: 10,000 steps expiring together (silent and killed
#             agent), three times, once with CPU profiles, twice with
#             compressed records (about 3 minutes)
# Usage: bash .devbin/device26.sh overload|recovery (one per call: a call may
# run 10 minutes at most).
#
# Copy this script next to a static reeve binary (CGO_ENABLED=0 go build -o
# .devbin/reeve ./cmd/reeve; plain or .xz) in an ignored folder and carry
# the folder. It needs bash, grep, awk and timeout; no Go, no network.
# Results in $OUT: results.jsonl (one reeve bench JSON report per line, with
# its name), log.txt (a one-line summary of each), errors.txt, info.txt,
# and for recovery cpu.pprof.silent and cpu.pprof.killed (read them where Go
# is: go tool pprof -top -cum -focus applyAll cpu.pprof.killed).
#
# Knobs (environment): overload: DUR (each open-loop run, 30s), CAP (skip
# the capacity run, use this many tasks/s), EXTRA (flags added to every run,
# e.g. --record-compression); recovery: N (steps, 10000).
#
# What to look for in recovery: whether the killed scenario's p99
# (redispatch_p99_ms) stays near its 2-core figure; if so, whether etcd's
# apply loop (go.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).applyAll
# and below, one goroutine) takes about as much CPU as the recovery lasts
# (last_done_ms): then the serial limit is etcd's apply, and the lever is
# fewer operations per recovery write (docs/benchmarks.md, "etcd's apply
# loop, the killed recovery's serial part").
set -u
shopt -s nullglob
mode=${1:-}
case $mode in
overload | recovery) ;;
*)
	echo "usage: $0 overload|recovery" >&2
	exit 2
	;;
esac
cd "$(dirname "$0")"
for f in *.xz; do
	[ -f "${f%.xz}" ] || xz -dk "$f"
done
chmod +x reeve
R=$PWD/reeve
W=$(mktemp -d)
O=${OUT:-$W/out}
mkdir -p "$O"
log() { echo "== $(date +%T) $*" | tee -a "$O/log.txt"; }
{ nproc; uptime; free -g 2>/dev/null; } > "$O/info.txt" 2>&1

# run NAME SUMMARY ARGS...: one reeve bench, its report appended to
# results.jsonl and SUMMARY's line of it to log.txt.
run() {
	local name=$1 summary=$2
	shift 2
	log "$name: reeve bench $*"
	timeout 300 "$R" bench -o json "$@" > "$W/r.json" 2> "$W/r.err"
	local rc=$?
	printf '{"name":"%s","rc":%d,"result":%s}\n' "$name" "$rc" "$(tr -d '\n' < "$W/r.json" | grep . || echo null)" >> "$O/results.jsonl"
	{ echo "== $name rc=$rc"; tail -20 "$W/r.err"; } >> "$O/errors.txt"
	"$summary" "$W/r.json" | tee -a "$O/log.txt"
}

# load_summary FILE: the figures that judge a load run, on one line.
load_summary() {
	local f
	for f in tasks_per_sec accepted refused p50_ms p99_ms refusal_p50_ms refusal_p99_ms errors lost; do
		printf '%s=%s ' "$f" "$(grep -o "\"$f\":[0-9.e+-]*" "$1" | head -1 | cut -d: -f2)"
	done
	printf 'windows_p99_ms=%s\n' "$(grep -o '"p99_ms":[0-9.]*' "$1" | sed 1d | cut -d: -f2 | awk '{printf "%d ", $1}')"
}

# recovery_summary FILE: each scenario's p99, last done, lost and stuck.
recovery_summary() {
	grep -o '"scenario":"[a-z]*"\|"redispatch_p99_ms":[0-9.]*\|"last_done_ms":[0-9.]*\|"lost":[0-9]*\|"stuck":[0-9]*' "$1" | tr '\n' ' '
	echo
}

overload() {
	local dur=${DUR:-30s} cap=${CAP:-}
	# shellcheck disable=SC2086 # EXTRA is a list of flags
	if [ -z "$cap" ]; then
		run capacity load_summary --embedded --steps 1 --tasks 100000000 --duration 20s --concurrency 512 --agents 4 --overload-target 0 ${EXTRA:-}
		cap=$(grep -o '"tasks_per_sec":[0-9.]*' "$W/r.json" | head -1 | cut -d: -f2 | cut -d. -f1)
	fi
	if [ -z "$cap" ] || [ "$cap" -le 0 ]; then
		log "no capacity measured; stopping"
		return 1
	fi
	local over=$((cap * 3 / 2)) under=$((cap * 4 / 5))
	log "capacity $cap tasks/s: 1.5x = $over/s, 0.8x = $under/s"
	openloop() { run "$1" load_summary --embedded --steps 1 --tasks 100000000 --duration "$dur" --agents 4 --rate "$2" "${@:3}" ${EXTRA:-}; }
	openloop over_default "$over"
	openloop over_cpu1ms "$over" --overload-cpu-target 1ms
	openloop over_write10ms "$over" --overload-target 10ms
	openloop over_off "$over" --overload-target 0
	openloop under_default "$under"
	openloop under_cpu1ms "$under" --overload-cpu-target 1ms
}

recovery() {
	local n=${N:-10000}
	run plain_1 recovery_summary --embedded --recovery --tasks "$n"
	run plain_2 recovery_summary --embedded --recovery --tasks "$n"
	run plain_3 recovery_summary --embedded --recovery --tasks "$n"
	run profiled recovery_summary --embedded --recovery --tasks "$n" --recovery-cpuprofile "$O/cpu.pprof"
	REEVE_RECORD_COMPRESSION=true run compressed_1 recovery_summary --embedded --recovery --tasks "$n"
	REEVE_RECORD_COMPRESSION=true run compressed_2 recovery_summary --embedded --recovery --tasks "$n"
}

"$mode"
log done
