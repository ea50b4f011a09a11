#!/usr/bin/env bash
# The Python example against a fresh `reeve dev --demo`: the Python agent
# serves python.reserve/release/charge; the Python client registers
# python.trip, submits tasks with ids and watches them: one SUCCEEDED, one
# whose declined charge is compensated (the reservation released). The
# same id submitted again is the same task. The agent then shuts down
# gracefully; the same over mutual TLS; then the conformance suite checks
# the Python agent.
#
# Usage: scripts/e2e/python.sh   (after `make python-example`)
set -euo pipefail
cd "$(dirname "$0")/../.."
REEVE=${REEVE:-./bin/reeve}
PY=${PYTHON:-/usr/bin/python3}
. scripts/e2e/lib.sh
PY_DIR=examples/python
[ -d "$PY_DIR/gen/reeve/v1" ] || fail "$PY_DIR/gen is missing: run make python-example"

start_dev
echo "reeve dev on $ADDR"

REEVE_ADDRESS=$ADDR REEVE_AGENT_ID=python-e2e "$PY" "$PY_DIR/agent.py" 2>"$E2E_DIR/python-agent.log" &
AGENT_PID=$!
E2E_PIDS+=("$AGENT_PID")

echo "+ $PY $PY_DIR/client.py --id trip-ok CI"
out=$(REEVE_ADDRESS=$ADDR timeout 60 "$PY" "$PY_DIR/client.py" --id trip-ok CI 2>&1) || fail "client exit $?:
$out"
sed 's/^/  /' <<<"$out"
grep -q 'ended TASK_STATE_SUCCEEDED' <<<"$out" || fail "the task did not succeed"
grep -q "'charged': 42" <<<"$out" || fail "the charge step's output is missing"
grep -q 'step.succeeded charge#1 by agent/python-e2e' <<<"$out" || fail "the history does not show the Python agent running charge"

# The same id again: the same task, not a second one.
again=$(REEVE_ADDRESS=$ADDR timeout 60 "$PY" "$PY_DIR/client.py" --id trip-ok CI 2>&1) || fail "resubmission: exit $?: $again"
grep -q '^submitted task trip-ok$' <<<"$again" || fail "resubmission returned another task: $again"
[ "$(grep -c 'step.succeeded' <<<"$again")" = "$(grep -c 'step.succeeded' <<<"$out")" ] || fail "resubmission ran the steps again: $again"

echo "+ $PY $PY_DIR/client.py --id trip-declined --amount 500 --expect TASK_STATE_COMPENSATED"
out=$(REEVE_ADDRESS=$ADDR timeout 60 "$PY" "$PY_DIR/client.py" --id trip-declined --amount 500 --expect TASK_STATE_COMPENSATED 2>&1) || fail "declined charge: exit $?:
$out"
sed 's/^/  /' <<<"$out"
grep -q 'card declined' <<<"$out" || fail "the declined charge is not in the history"
grep -Eq 'compensation.succeeded reserve#[0-9]+ by agent/python-e2e' <<<"$out" || fail "the history does not show the Python agent compensating reserve"
grep -q '"msg": "released", "reservation": "seat-trip-declined"' "$E2E_DIR/python-agent.log" || fail "the agent did not release seat-trip-declined"

# A step completed from outside (issue 35): by name, by token, rejected.
for args in "" "--by-token" "--reject rejected"; do
	echo "+ $PY $PY_DIR/approval.py $args"
	# shellcheck disable=SC2086
	out=$(REEVE_ADDRESS=$ADDR timeout 60 "$PY" "$PY_DIR/approval.py" $args 2>&1) || fail "approval $args: exit $?:
$out"
	sed 's/^/  /' <<<"$out"
	grep -q 'repeated=True' <<<"$out" || fail "the repeated completion was not answered as the first"
done

# SIGTERM: the agent drains and exits 0.
kill -TERM "$AGENT_PID"
for _ in $(seq 100); do
	kill -0 "$AGENT_PID" 2>/dev/null || break
	sleep 0.1
done
kill -0 "$AGENT_PID" 2>/dev/null && fail "the Python agent did not exit within 10s of SIGTERM"
wait "$AGENT_PID" || fail "the Python agent exited with $? after SIGTERM"
echo "PASS: Python client and agent against reeve dev"

# The same in secure mode: mutual TLS, the agent with the agent certificate,
# the client as admin (clients may not register workflows).
restart_dev_secure
REEVE_ADDRESS=$ADDR REEVE_AGENT_ID=python-e2e-tls REEVE_TLS_CERT=$CERTS/agent.pem REEVE_TLS_KEY=$CERTS/agent-key.pem \
	"$PY" "$PY_DIR/agent.py" 2>"$E2E_DIR/python-agent-tls.log" &
E2E_PIDS+=($!)
out=$(REEVE_ADDRESS=$ADDR timeout 60 "$PY" "$PY_DIR/client.py" TLS 2>&1) || fail "client over mutual TLS: exit $?:
$out"
grep -q 'ended TASK_STATE_SUCCEEDED' <<<"$out" || fail "over mutual TLS, the task did not succeed: $out"
if REEVE_ADDRESS=$ADDR REEVE_TLS_CA= REEVE_TLS_CERT= REEVE_TLS_KEY= timeout 20 "$PY" "$PY_DIR/client.py" --timeout 5 >/dev/null 2>&1; then
	fail "a plaintext client was served by a secure scheduler"
fi
echo "PASS: Python client and agent over mutual TLS"
unset REEVE_TLS_CA REEVE_TLS_CERT REEVE_TLS_KEY

echo "+ reeve conformance -- $PY $PY_DIR/agent.py"
"$REEVE" conformance -- "$PY" "$PY_DIR/agent.py" 2>"$E2E_DIR/conformance-python.log" || fail "the Python agent does not conform"
echo "+ reeve conformance --secure -- $PY $PY_DIR/agent.py"
"$REEVE" conformance --secure -- "$PY" "$PY_DIR/agent.py" 2>"$E2E_DIR/conformance-python-tls.log" || fail "the Python agent does not conform over mutual TLS"
