# Shared by the e2e scripts: start `reeve dev --demo` with every listener on
# a free loopback port (port 0: nothing collides with a `make run` or another
# test on this machine) and a temporary data dir, and clean everything up on
# exit, showing the logs when the script failed.
# Source it from a script run with `set -euo pipefail`; REEVE (the binary)
# must be set.

E2E_DIR=$(mktemp -d "${TMPDIR:-/tmp}/reeve-e2e.XXXXXX")
E2E_PIDS=()

e2e_cleanup() {
	local status=$?
	for pid in "${E2E_PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${E2E_PIDS[@]}"; do
		for _ in $(seq 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	done
	if [ "$status" -ne 0 ]; then
		echo "--- FAILED (exit $status); logs:" >&2
		for f in "$E2E_DIR"/*.out "$E2E_DIR"/*.log; do
			[ -f "$f" ] || continue
			echo "--- $f" >&2
			tail -n 40 "$f" >&2
		done
	fi
	rm -rf "$E2E_DIR"
	exit "$status"
}
trap e2e_cleanup EXIT
trap 'exit 130' INT TERM

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# start_dev [--secure] starts `reeve dev --demo` and sets ADDR once the demo
# workflows are registered. With --secure it sets CERTS, the directory of
# the certificates reeve dev created, and reeve commands act as admin.
start_dev() {
	: >"$E2E_DIR/dev.out"
	"$REEVE" dev --demo "$@" --listen 127.0.0.1:0 --console-listen 127.0.0.1:0 --etcd-listen 127.0.0.1:0 --data-dir "$E2E_DIR/data" >"$E2E_DIR/dev.out" 2>"$E2E_DIR/dev.log" &
	E2E_PIDS+=($!)
	ADDR=""
	for _ in $(seq 300); do
		ADDR=$(sed -n "s/^reeve dev: scheduler and supervisor on \([^ ,]*\).*/\1/p" "$E2E_DIR/dev.out")
		[ -n "$ADDR" ] && break
		kill -0 "${E2E_PIDS[-1]}" 2>/dev/null || fail "reeve dev exited: $(cat "$E2E_DIR/dev.log")"
		sleep 0.1
	done
	[ -n "$ADDR" ] || fail "reeve dev did not start within 30s"
	if [ "${1:-}" = --secure ]; then
		CERTS=$E2E_DIR/data/certs
		export REEVE_TLS_CA=$CERTS/ca.pem REEVE_TLS_CERT=$CERTS/admin.pem REEVE_TLS_KEY=$CERTS/admin-key.pem
	fi
	for _ in $(seq 300); do
		"$REEVE" --address "$ADDR" workflow get demo.orders >/dev/null 2>&1 && return 0
		kill -0 "${E2E_PIDS[-1]}" 2>/dev/null || fail "reeve dev exited: $(cat "$E2E_DIR/dev.log")"
		sleep 0.1
	done
	fail "demo.orders not registered within 30s"
}

# restart_dev_secure stops the `reeve dev` start_dev started (it must exit 0
# on SIGTERM), forgets the processes started so far, and starts it again
# with --secure on fresh data (ADDR and CERTS set, reeve commands as admin).
restart_dev_secure() {
	kill -TERM "${E2E_PIDS[0]}"
	wait "${E2E_PIDS[0]}" || fail "reeve dev exited with $? on SIGTERM"
	E2E_PIDS=()
	rm -rf "$E2E_DIR/data"
	start_dev --secure
	echo "reeve dev --secure on $ADDR"
}
