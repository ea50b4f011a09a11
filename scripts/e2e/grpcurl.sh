#!/usr/bin/env bash
# Runs the grpcurl examples of README.md ("The same with grpcurl") against a
# fresh `reeve dev --demo` and checks their output. The commands are taken
# from README.md itself, so the README cannot drift from what works.
#
# Usage: scripts/e2e/grpcurl.sh   (REEVE and GRPCURL: the binaries)
set -euo pipefail
cd "$(dirname "$0")/../.."
REEVE=${REEVE:-./bin/reeve}
GRPCURL=${GRPCURL:-grpcurl}
. scripts/e2e/lib.sh

# The README block: from "## The same with grpcurl" to the end of its first
# ```sh block, continuation lines joined.
mapfile -t CMDS < <(awk '
	/^## The same with grpcurl/ { section = 1; next }
	section && /^```sh/ { block = 1; next }
	block && /^```/ { exit }
	block { print }
' README.md | sed -e ':a' -e '/\\$/N; s/\\\n[[:space:]]*/ /; ta' | grep '^grpcurl ')
[ "${#CMDS[@]}" -ge 3 ] || fail "README.md: expected at least 3 grpcurl commands, found ${#CMDS[@]}"

start_dev
echo "reeve dev on $ADDR"

TASK_ID=""
for cmd in "${CMDS[@]}"; do
	cmd=${cmd//127.0.0.1:7430/$ADDR}
	case "$cmd" in
	*"<task-id>"*)
		[ -n "$TASK_ID" ] || fail "README uses <task-id> before a SubmitTask"
		cmd=${cmd//<task-id>/$TASK_ID}
		;;
	esac
	echo "+ $cmd"
	# The README's quoting is shell quoting: evaluate it as a user would.
	out=$(eval "${cmd/#grpcurl/\"\$GRPCURL\"}" 2>&1) || fail "exit $?: $cmd
$out"
	sed -n '1,12s/^/  /p' <<<"$out"
	case "$cmd" in
	*" list")
		for svc in reeve.v1.SchedulerService reeve.v1.AgentService reeve.v1.SupervisorService grpc.health.v1.Health; do
			grep -qx "$svc" <<<"$out" || fail "list does not show $svc"
		done
		;;
	*SchedulerService/SubmitTask)
		TASK_ID=$(sed -n 's/^ *"id": *"\([^"]*\)".*/\1/p' <<<"$out" | head -n 1)
		[ -n "$TASK_ID" ] || fail "SubmitTask printed no task id"
		grep -Eq '"created": *true' <<<"$out" || fail "SubmitTask did not create a task"
		grep -Eq '"order_id": *"o-3"' <<<"$out" || fail "SubmitTask did not echo the input"
		;;
	*SchedulerService/GetTask)
		grep -Eq "\"id\": *\"$TASK_ID\"" <<<"$out" || fail "GetTask did not return task $TASK_ID"
		# The task finishes within seconds: follow it to the end the same way.
		for _ in $(seq 100); do
			grep -Eq '"state": *"TASK_STATE_SUCCEEDED"' <<<"$out" && break
			sleep 0.2
			out=$(eval "${cmd/#grpcurl/\"\$GRPCURL\"}")
		done
		grep -Eq '"state": *"TASK_STATE_SUCCEEDED"' <<<"$out" || fail "task $TASK_ID did not succeed: $out"
		;;
	esac
done

# Health, as load balancers and grpcurl users ask it.
out=$("$GRPCURL" -plaintext "$ADDR" grpc.health.v1.Health/Check)
grep -Eq '"status": *"SERVING"' <<<"$out" || fail "health: $out"
echo "PASS: ${#CMDS[@]} README grpcurl commands and a health check against reeve dev"
