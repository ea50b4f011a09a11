#!/usr/bin/env bash
# The TypeScript example against a fresh `reeve dev --demo`: the Node agent
# serves node.greet, the Node client registers the workflow, submits a task
# and watches it to SUCCEEDED; the agent then shuts down gracefully. Then the
# conformance suite checks the Node agent.
#
# Usage: scripts/e2e/node.sh   (after `npm ci && npm run build` in examples/node)
set -euo pipefail
cd "$(dirname "$0")/../.."
REEVE=${REEVE:-./bin/reeve}
. scripts/e2e/lib.sh
NODE_DIR=examples/node
[ -f "$NODE_DIR/dist/agent.js" ] || fail "$NODE_DIR is not built: run make node-example"

start_dev
echo "reeve dev on $ADDR"

REEVE_ADDRESS=$ADDR REEVE_AGENT_ID=node-e2e node "$NODE_DIR/dist/agent.js" 2>"$E2E_DIR/node-agent.log" &
AGENT_PID=$!
E2E_PIDS+=("$AGENT_PID")

echo "+ node $NODE_DIR/dist/client.js CI"
out=$(REEVE_ADDRESS=$ADDR timeout 60 node "$NODE_DIR/dist/client.js" CI 2>&1) || fail "client exit $?:
$out"
sed 's/^/  /' <<<"$out"
grep -q 'TASK_STATE_SUCCEEDED' <<<"$out" || fail "the task did not succeed"
grep -q '"greeting":"Hello, CI!"' <<<"$out" || fail "the greet step's output is missing"

# The scheduler recorded the Node agent as the one that ran it.
TASK_ID=$(sed -n 's/^submitted task //p' <<<"$out")
task=$("$REEVE" --address "$ADDR" task get "$TASK_ID" -o json)
grep -Eq '"actor": *"agent/node-e2e"' <<<"$task" || fail "task $TASK_ID was not run by the Node agent: $task"

# A step completed from outside (issue 35): by name, by token, rejected.
for args in "" "--by-token" "--reject rejected"; do
	echo "+ node $NODE_DIR/dist/approval.js $args"
	# shellcheck disable=SC2086
	out=$(REEVE_ADDRESS=$ADDR timeout 60 node "$NODE_DIR/dist/approval.js" $args 2>&1) || fail "approval $args: exit $?:
$out"
	sed 's/^/  /' <<<"$out"
	grep -q 'repeated=true' <<<"$out" || fail "the repeated completion was not answered as the first"
done

# SIGTERM: the agent drains and exits 0.
kill -TERM "$AGENT_PID"
for _ in $(seq 100); do
	kill -0 "$AGENT_PID" 2>/dev/null || break
	sleep 0.1
done
kill -0 "$AGENT_PID" 2>/dev/null && fail "the Node agent did not exit within 10s of SIGTERM"
wait "$AGENT_PID" || fail "the Node agent exited with $? after SIGTERM"
echo "PASS: Node client and agent against reeve dev (task $TASK_ID)"

# The same in secure mode: mutual TLS, the agent with the agent certificate,
# the client as admin (clients may not register workflows).
restart_dev_secure
REEVE_ADDRESS=$ADDR REEVE_AGENT_ID=node-e2e-tls REEVE_TLS_CERT=$CERTS/agent.pem REEVE_TLS_KEY=$CERTS/agent-key.pem \
	node "$NODE_DIR/dist/agent.js" 2>"$E2E_DIR/node-agent-tls.log" &
E2E_PIDS+=($!)
out=$(REEVE_ADDRESS=$ADDR timeout 60 node "$NODE_DIR/dist/client.js" TLS 2>&1) || fail "client over mutual TLS: exit $?:
$out"
grep -q '"greeting":"Hello, TLS!"' <<<"$out" || fail "over mutual TLS, the greet step's output is missing: $out"
if REEVE_ADDRESS=$ADDR REEVE_TLS_CA= REEVE_TLS_CERT= REEVE_TLS_KEY= timeout 20 node "$NODE_DIR/dist/client.js" 2>/dev/null; then
	fail "a plaintext client was served by a secure scheduler"
fi
echo "PASS: Node client and agent over mutual TLS"
unset REEVE_TLS_CA REEVE_TLS_CERT REEVE_TLS_KEY

echo "+ reeve conformance -- node $NODE_DIR/dist/agent.js"
"$REEVE" conformance -- node "$NODE_DIR/dist/agent.js" 2>"$E2E_DIR/conformance-node.log" || fail "the Node agent does not conform"
echo "+ reeve conformance --secure -- node $NODE_DIR/dist/agent.js"
"$REEVE" conformance --secure -- node "$NODE_DIR/dist/agent.js" 2>"$E2E_DIR/conformance-node-tls.log" || fail "the Node agent does not conform over mutual TLS"
