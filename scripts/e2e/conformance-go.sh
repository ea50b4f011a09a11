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

# The same over mutual TLS with role checks: the suite serves as a secure
# scheduler does and gives the agent an agent certificate.
echo "+ reeve conformance --secure -- reeve conformance agent"
"$REEVE" conformance --secure -- "$REEVE" conformance agent --id go-sdk-e2e-tls 2>"$E2E_DIR/conformance-go-tls.log" || fail "the Go SDK agent does not conform over mutual TLS"
# A plaintext agent is refused by the secure suite.
if "$REEVE" conformance --secure --run '^register$' --connect-timeout 5s -- env REEVE_TLS_CA= REEVE_TLS_CERT= REEVE_TLS_KEY= "$REEVE" conformance agent >/dev/null 2>&1; then
	fail "a plaintext agent passed the secure conformance suite"
fi
