#!/usr/bin/env bash
# Issue 26, part 3, on a machine lent for it: the recovery of 10,000 steps
# expiring together (silent and killed agent), several times, once with a
# CPU profile of each scenario, and with compressed records.
#
# Copy this script next to a static reeve binary (CGO_ENABLED=0 go build -o
# .devbin/reeve ./cmd/reeve; plain or .xz) in an ignored folder, carry the
# folder, and run `bash .devbin/recovery16.sh`. It needs bash, grep and
# timeout; no Go, no network. Results: $OUT/results.jsonl (one reeve bench
# --recovery JSON report per line, with its name), $OUT/log.txt, and the
# profiles $OUT/cpu.pprof.silent and $OUT/cpu.pprof.killed (read them where
# Go is: go tool pprof -top -cum reeve cpu.pprof.killed). About 3 minutes.
#
# What to look for: whether the killed scenario's p99 (redispatch_p99_ms)
# stays near its 2-core figure; if it does, whether etcd's apply loop
# (go.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).applyAll and below, one
# goroutine) takes about as much CPU as the recovery lasts (last_done_ms):
# then the serial limit is etcd's apply, and the lever is fewer or cheaper
# operations per recovery write.
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
N=${N:-10000}
log() { echo "== $(date +%T) $*" | tee -a "$O/log.txt"; }
{ nproc; uptime; free -g 2>/dev/null; } > "$O/info.txt" 2>&1

# run NAME ARGS...: one recovery bench, its report appended to results.jsonl.
run() {
	local name=$1
	shift
	log "$name: reeve bench --embedded --recovery --tasks $N $*"
	timeout 300 "$R" bench --embedded --recovery --tasks "$N" -o json "$@" > "$W/r.json" 2> "$W/r.err"
	local rc=$?
	printf '{"name":"%s","rc":%d,"result":%s}\n' "$name" "$rc" "$(tr -d '\n' < "$W/r.json" | grep . || echo null)" >> "$O/results.jsonl"
	{ echo "== $name rc=$rc"; tail -20 "$W/r.err"; } >> "$O/errors.txt"
	grep -o '"scenario":"[a-z]*"\|"redispatch_p99_ms":[0-9.]*\|"last_done_ms":[0-9.]*\|"lost":[0-9]*\|"stuck":[0-9]*' "$W/r.json" | tr '\n' ' ' | tee -a "$O/log.txt"
	echo | tee -a "$O/log.txt"
}

run plain_1
run plain_2
run plain_3
run profiled --recovery-cpuprofile "$O/cpu.pprof"
REEVE_RECORD_COMPRESSION=true run compressed_1
REEVE_RECORD_COMPRESSION=true run compressed_2
log done
