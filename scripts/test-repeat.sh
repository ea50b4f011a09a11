#!/usr/bin/env bash
# `make test-repeat`: runs the cluster tests (make test-cluster's packages)
# and the tests that once depended on the machine's timing, REPEAT times
# (default 10), and stops at the first failure, saying which run and which
# part failed. A test that passes only when the machine is quiet fails here
# sooner or later.
#
#   REPEAT=10      how many runs
#   ONLY=cluster   only the cluster tests; ONLY=timing only the others
#   BUSY=1         keep this many cores busy (a spinning process each) while
#                  the runs go on: the extra load issue 24 asks to hold at
#
# Every part of every run has its log in $LOGS (default a new directory
# under /tmp), kept after the script ends. The browser test runs only where
# chromium is installed (make e2e-console installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
REPEAT=${REPEAT:-10}
ONLY=${ONLY:-}
BUSY=${BUSY:-0}
LOGS=${LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/reeve-test-repeat.XXXXXX")}
mkdir -p "$LOGS"
case "$ONLY" in
"" | cluster | timing) ;;
*)
	echo "ONLY must be cluster or timing, not $ONLY" >&2
	exit 2
	;;
esac

# The timing-sensitive tests, as package:regexp. Named in earlier sessions'
# notes for failing under load (issue 24 made them robust); a test added to
# this list is one whose outcome must not depend on the load.
TIMING=(
	"./supervisor:^(TestRandomizedRunNeverStrandsAStep|TestRandomOperatorActionsKeepEveryTaskMovingAndTheStoreConsistent|TestMissedHeartbeatExpiresAttemptEarly|TestEscalations)$"
	"./scheduler:^(TestNearQuotaRefusesNewTasksWhileRunningOnesFinish|TestNoSpaceAlarmRefusesNewTasksUntilDisarmed|TestNoSpaceRecoversByItselfOnceDataIsDeleted|TestAdmissionReservesSpaceForWorkInFlight|TestUndecodableRequestsAreInvalidArgument|TestTwoSchedulersNeverDispatchTheSameAttemptTwice)$"
	"./internal/store:^TestCommitWindow"
	"./internal/conformance:^TestRawAgentConforms$"
	"./agentsdk:^TestResultSurvivesSchedulerCrash$"
	"./internal/console:^TestBrowser"
)

busy=()
stop_busy() {
	for pid in "${busy[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
}
trap stop_busy EXIT
for ((i = 0; i < BUSY; i++)); do
	(while :; do :; done) &
	busy+=($!)
done

# part NAME COMMAND...: runs one part of a run, its output in a log; on a
# failure it names the run and the log and ends the script.
part() {
	local name=$1 log="$LOGS/run-$run-$1.log" began=$SECONDS
	shift
	if "$@" >"$log" 2>&1; then
		echo "run $run of $REPEAT: $name ok ($((SECONDS - began)) s, load $(cut -d' ' -f1 /proc/loadavg))"
		return
	fi
	echo "run $run of $REPEAT: $name FAILED ($((SECONDS - began)) s, load $(cut -d' ' -f1 /proc/loadavg)); its log: $log" >&2
	grep -E '^(--- FAIL|FAIL|panic:)|_test\.go:[0-9]+:' "$log" | head -40 >&2 || tail -40 "$log" >&2
	echo "test-repeat: $((run - 1)) of $REPEAT runs green before run $run failed in $name" >&2
	exit 1
}

echo "test-repeat: $REPEAT runs${ONLY:+ of the $ONLY tests}, $BUSY busy cores, logs in $LOGS"
for ((run = 1; run <= REPEAT; run++)); do
	if [[ "$ONLY" != timing ]]; then
		part cluster env REEVE_CLUSTER_TESTS=1 REEVE_REQUIRE_BINARIES=1 \
			go test -race -count=1 -timeout 10m ./internal/cluster/... ./internal/chaos/...
	fi
	if [[ "$ONLY" != cluster ]]; then
		for t in "${TIMING[@]}"; do
			pkg=${t%%:*}
			name=${pkg#./}
			part "timing-${name//\//-}" env REEVE_BROWSER_TESTS=1 \
				go test -race -count=1 -timeout 10m -run "${t#*:}" "$pkg"
		done
	fi
done
echo "test-repeat: $REPEAT of $REPEAT runs green${ONLY:+ ($ONLY)}"
