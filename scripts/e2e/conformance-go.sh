#!/usr/bin/env bash
# The conformance suite against the Go SDK's reference agent, run as a
# separate process like any other agent.
#
# Usage: scripts/e2e/conformance-go.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
REEVE=${REEVE:-./bin/reeve}
. scripts/e2e/lib.sh

echo "+ reeve conformance -- reeve conformance agent"
"$REEVE" conformance -- "$REEVE" conformance agent --id go-sdk-e2e 2>"$E2E_DIR/conformance-go.log" || fail "the Go SDK agent does not conform"
