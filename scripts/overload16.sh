#!/usr/bin/env bash
# Issue 26, part 1, on a machine lent for it: admitted latency and refusals
# at 1.5x capacity, with the default shedding, a lower write target, the
# run-queue (CPU) target, and none.
#
# Copy this script next to a static reeve binary (CGO_ENABLED=0 go build -o
# .devbin/reeve ./cmd/reeve; plain or .xz) in an ignored folder, carry the
# folder, and run `bash .devbin/overload16.sh`. It needs bash, grep, awk and
# timeout; no Go, no network. Results: $OUT/results.jsonl (one reeve bench
# JSON report per line, with its name) and $OUT/log.txt; about 5 minutes.
#
# Knobs (environment): DUR (each open-loop run, default 30s), CAP (skip the
# capacity run and use this many tasks/s), EXTRA (flags added to every run,
# e.g. --record-compression).
set -u
shopt -s nullglob
cd "$(dirname "$0")"
for f in *.xz; do
	[ -f "${f%.xz}" ] || xz -dk "$f"
done
chmod +x reeve
R=$PWD/reeve
W=$(mktemp -d)
O=${OUT:-$W/out}
mkdir -p "$O"
DUR=${DUR:-30s}
EXTRA=${EXTRA:-}
log() { echo "== $(date +%T) $*" | tee -a "$O/log.txt"; }
{ nproc; uptime; free -g 2>/dev/null; } > "$O/info.txt" 2>&1

# run NAME ARGS...: one embedded bench, its report appended to results.jsonl.
run() {
	local name=$1
	shift
	log "$name: reeve bench --embedded $* $EXTRA"
	# shellcheck disable=SC2086 # EXTRA is a list of flags
	timeout 300 "$R" bench --embedded --steps 1 -o json "$@" $EXTRA > "$W/r.json" 2> "$W/r.err"
	local rc=$?
	printf '{"name":"%s","rc":%d,"result":%s}\n' "$name" "$rc" "$(tr -d '\n' < "$W/r.json" | grep . || echo null)" >> "$O/results.jsonl"
	{ echo "== $name rc=$rc"; tail -20 "$W/r.err"; } >> "$O/errors.txt"
	summary "$W/r.json" | tee -a "$O/log.txt"
}

# summary FILE: the figures that judge the run, on one line.
summary() {
	local f
	for f in tasks_per_sec accepted refused p50_ms p99_ms refusal_p50_ms refusal_p99_ms errors lost; do
		printf '%s=%s ' "$f" "$(grep -o "\"$f\":[0-9.e+-]*" "$1" | head -1 | cut -d: -f2)"
	done
	printf 'windows_p99_ms=%s\n' "$(grep -o '"p99_ms":[0-9.]*' "$1" | sed 1d | cut -d: -f2 | awk '{printf "%d ", $1}')"
}

# Capacity: a closed loop with shedding off.
cap=${CAP:-}
if [ -z "$cap" ]; then
	run capacity --tasks 100000000 --duration 20s --concurrency 512 --agents 4 --overload-target 0
	cap=$(grep -o '"tasks_per_sec":[0-9.]*' "$W/r.json" | head -1 | cut -d: -f2 | cut -d. -f1)
fi
if [ -z "$cap" ] || [ "$cap" -le 0 ]; then
	log "no capacity measured; stopping"
	exit 1
fi
over=$((cap * 3 / 2))
under=$((cap * 4 / 5))
log "capacity $cap tasks/s: 1.5x = $over/s, 0.8x = $under/s"

openloop() { run "$1" --tasks 100000000 --duration "$DUR" --agents 4 --rate "$2" "${@:3}"; }
openloop over_default "$over"
openloop over_cpu1ms "$over" --overload-cpu-target 1ms
openloop over_write10ms "$over" --overload-target 10ms
openloop over_off "$over" --overload-target 0
openloop under_default "$under"
openloop under_cpu1ms "$under" --overload-cpu-target 1ms
log done
