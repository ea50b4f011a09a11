#!/usr/bin/env bash
# The trip saga (examples/trip) against a fresh `reeve dev --demo`, as
# README's "Your own workflow" tells a new user to run it: register
# trip.yaml with `reeve workflow register -f`, run the Go agent, book with
# the Go client. A trip is booked (the same id again is the same trip); a
# trip whose card is declined ends COMPENSATED, its hotel and flight
# undone by the agent, in that order. Then the same over mutual TLS
# (`reeve dev --secure`): the agent with the agent certificate, the client
# with the client certificate; a plaintext client is not served, and told
# that the scheduler may serve TLS.
#
# Usage: scripts/e2e/trip.sh   (after `make build`)
set -euo pipefail
cd "$(dirname "$0")/../.."
REEVE=${REEVE:-./bin/reeve}
. scripts/e2e/lib.sh

go build -o "$E2E_DIR/trip-agent" ./examples/trip/agent
go build -o "$E2E_DIR/trip-client" ./examples/trip/client

start_dev
echo "reeve dev on $ADDR"
echo "+ reeve workflow register -f examples/trip/trip.yaml"
"$REEVE" --address "$ADDR" workflow register -f examples/trip/trip.yaml >/dev/null || fail "register trip.yaml"

"$E2E_DIR/trip-agent" --address "$ADDR" --agent-id trip-e2e 2>"$E2E_DIR/trip-agent.log" &
AGENT_PID=$!
E2E_PIDS+=("$AGENT_PID")

echo "+ trip client --id trip-ok"
out=$(timeout 60 "$E2E_DIR/trip-client" --address "$ADDR" --id trip-ok 2>&1) || fail "client exit $?: $out"
sed 's/^/  /' <<<"$out"
grep -q '^trip trip-ok booked: flight flight-trip-ok, hotel hotel-trip-ok, charged 560 (charge-trip-ok)$' <<<"$out" || fail "trip-ok was not booked"
again=$(timeout 60 "$E2E_DIR/trip-client" --address "$ADDR" --id trip-ok 2>&1) || fail "resubmission: exit $?: $again"
[ "$again" = "$out" ] || fail "the same id again gave another trip: $again"
[ "$(grep -c 'msg=charged task_id=trip-ok' "$E2E_DIR/trip-agent.log")" = 1 ] || fail "trip-ok was charged more than once"

echo "+ trip client --id trip-declined --card declined"
code=0
out=$(timeout 60 "$E2E_DIR/trip-client" --address "$ADDR" --id trip-declined --card declined 2>&1) || code=$?
sed 's/^/  /' <<<"$out"
[ "$code" = 2 ] || fail "declined card: exit $code, want 2 (the trip not booked)"
grep -q '^trip trip-declined not booked: task trip-declined COMPENSATED' <<<"$out" || fail "trip-declined did not end COMPENSATED"
grep -q 'failed step charge_card (card_declined)' <<<"$out" || fail "the declined charge is not the cause"
grep -Eq 'book_flight +STEP_STATE_COMPENSATED' <<<"$out" || fail "the flight was not undone"
grep -Eq 'book_hotel +STEP_STATE_COMPENSATED' <<<"$out" || fail "the hotel was not undone"
undone=$(sed -n 's/.*msg=undone task_id=trip-declined step=\([a-z_]*\).*/\1/p' "$E2E_DIR/trip-agent.log" | tr '\n' ' ')
[ "$undone" = "book_hotel book_flight " ] || fail "the agent undid [$undone], want the hotel, then the flight"
"$REEVE" --address "$ADDR" task get trip-declined -o json | grep -q '"state": *"TASK_STATE_COMPENSATED"' || fail "reeve task get does not show trip-declined COMPENSATED"

kill -TERM "$AGENT_PID"
wait "$AGENT_PID" || fail "the agent exited with $? after SIGTERM"
echo "PASS: the trip saga with the Go agent and the Go client"

restart_dev_secure
"$REEVE" --address "$ADDR" workflow register -f examples/trip/trip.yaml >/dev/null || fail "register trip.yaml as admin"
"$E2E_DIR/trip-agent" --address "$ADDR" --agent-id trip-e2e-tls --ca "$CERTS/ca.pem" --cert "$CERTS/agent.pem" --key "$CERTS/agent-key.pem" 2>"$E2E_DIR/trip-agent-tls.log" &
E2E_PIDS+=($!)
echo "+ trip client --id trip-tls --ca ca.pem --cert client.pem --key client-key.pem"
out=$(timeout 60 "$E2E_DIR/trip-client" --address "$ADDR" --id trip-tls --ca "$CERTS/ca.pem" --cert "$CERTS/client.pem" --key "$CERTS/client-key.pem" 2>&1) || fail "client over mutual TLS: exit $?: $out"
sed 's/^/  /' <<<"$out"
grep -q '^trip trip-tls booked:' <<<"$out" || fail "over mutual TLS, trip-tls was not booked"
code=0
out=$(timeout 60 "$E2E_DIR/trip-client" --address "$ADDR" --id trip-plain --timeout 10s 2>&1) || code=$?
[ "$code" = 1 ] || fail "a plaintext client of a secure scheduler: exit $code, want 1: $out"
grep -q "hint: the scheduler may serve TLS: set client.WithTLSFiles" <<<"$out" || fail "a plaintext client of a secure scheduler is not told it may serve TLS: $out"
echo "PASS: the trip saga over mutual TLS"
