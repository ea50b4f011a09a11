#!/usr/bin/env bash
# Temporal side by side (docs/benchmarks.md): the workload of
# `reeve bench --steps 1` against Temporal's dev server on this machine.
# Installs the Temporal CLI (which embeds the dev server) from the Go module
# proxy into scripts/bench-temporal/bin, starts `temporal server start-dev`
# (in-memory SQLite, no UI), measures its idle RSS, runs the load
# (scripts/bench-temporal, its own module, so Reeve's go.mod stays clean)
# and prints one JSON object per run: tasks/s, p50/p99/max, server CPU per
# workflow, idle and loaded RSS. Not part of `make test` or `make bench`.
#
# TEMPORAL_TASKS (default 2000) and TEMPORAL_CONCURRENCY (default 128) set the
# closed loop; TEMPORAL_RATE (default 50) and TEMPORAL_DURATION (default 30s)
# the open loop that follows it.
set -euo pipefail
cd "$(dirname "$0")/bench-temporal"
CLI_VERSION=v1.5.1 # github.com/temporalio/cli; the Go SDK is pinned in go.mod
TASKS=${TEMPORAL_TASKS:-2000}
CONCURRENCY=${TEMPORAL_CONCURRENCY:-128}
RATE=${TEMPORAL_RATE:-50}
DURATION=${TEMPORAL_DURATION:-30s}
bin=$PWD/bin
mkdir -p "$bin"
if [ ! -x "$bin/temporal" ]; then
	echo "installing the Temporal CLI $CLI_VERSION (a large build: minutes)" >&2
	GOBIN=$bin go install "github.com/temporalio/cli/cmd/temporal@$CLI_VERSION"
fi
go build -o "$bin/bench-temporal" .

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
log=$(mktemp)
"$bin/temporal" server start-dev --headless --ip 127.0.0.1 --port "$port" --log-level error >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -f "$log"' EXIT
# Ready when the frontend answers (bounded: 60 s).
for _ in $(seq 1 120); do
	if "$bin/temporal" operator namespace describe --namespace default --address "127.0.0.1:$port" >/dev/null 2>&1; then
		break
	fi
	if ! kill -0 $server 2>/dev/null; then
		echo "the dev server exited:" >&2
		cat "$log" >&2
		exit 1
	fi
	sleep 0.5
done
"$bin/temporal" operator namespace describe --namespace default --address "127.0.0.1:$port" >/dev/null
sleep 5 # let start-up work settle before the idle RSS is read
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$bin/bench-temporal" -address "127.0.0.1:$port" -server-pid $server -tasks "$TASKS" -concurrency "$CONCURRENCY"
"$bin/bench-temporal" -address "127.0.0.1:$port" -server-pid $server -tasks 10000000 -rate "$RATE" -duration "$DURATION"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
