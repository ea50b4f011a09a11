#!/usr/bin/python3
"""A Reeve agent written against the generated stubs only, speaking the raw
agent protocol of docs/agent-protocol.md: register, ack each assignment, run
it, report before complete_by, redeliver unacknowledged results after a
reconnect, obey CancelStep and Drain, heartbeat, and shut down gracefully on
SIGTERM (send Drain, finish running steps, exit 0).

Step types: python.reserve, python.release (its compensation) and
python.charge for the example workflow python.trip (client.py), and
reeve.conformance so that `reeve conformance -- python3 agent.py` can check
it.

    REEVE_ADDRESS=127.0.0.1:7430 python3 agent.py
"""

import json
import os
import queue
import random
import signal
import socket
import sys
import threading
import time

import grpc

import reeve_grpc as r

MAX_CONCURRENT = 16
FATAL = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED}


def log(msg, **fields):
    print(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "msg": msg, **fields}), file=sys.stderr, flush=True)


class StepFailure(Exception):
    """A failure with a code, matched against the retry policy's non_retryable_error_codes."""

    def __init__(self, message, code="", non_retryable=False):
        super().__init__(message)
        self.code = code
        self.non_retryable = non_retryable


class Aborted(Exception):
    """The step was canceled or passed its complete_by: report nothing."""


class Step:
    """One execution of a step, as a handler sees it."""

    def __init__(self, agent, key, ex, a):
        self.ref = a.ref
        self.type = a.type
        self.attempt = a.ref.attempt
        self.input = r.from_value(a, "input")
        self.config = r.from_value(a, "config")
        self.deps = {k: r.from_value_msg(v) for k, v in a.dependency_outputs.items()}
        self.idempotency_key = a.idempotency_key
        self.compensation = a.compensation
        self.complete_by = ex.complete_by
        self._agent, self._key, self._ex = agent, key, ex

    @property
    def aborted(self):
        return self._ex.abort.is_set()

    def sleep(self, secs):
        """Work for secs, heartbeating; raises Aborted when canceled or at complete_by."""
        end = time.monotonic() + secs
        while True:
            self.heartbeat()
            left = end - time.monotonic()
            if left <= 0:
                return
            if self._ex.abort.wait(min(left, 0.05)):
                raise Aborted()

    def heartbeat(self):
        """Tells the scheduler the step is alive; coalesced, call it as often as you like."""
        self._agent.heartbeat(self._key, self._ex)


# ---- step handlers ----

def reserve(step):
    trav = (step.input or {}).get("traveller", "nobody")
    # A real service would be called with step.idempotency_key, so that a
    # retry does not reserve twice.
    return {"reservation": f"seat-{step.ref.task_id}", "traveller": trav}


def release(step):
    # The compensation of reserve: its output is the reservation to undo.
    res = step.deps.get("reserve") or {}
    log("released", reservation=res.get("reservation", ""), task_id=step.ref.task_id, compensation=step.compensation)
    return {"released": res.get("reservation", ""), "compensation": step.compensation}


def charge(step):
    amount = (step.input or {}).get("amount", 0)
    if amount > 100:
        raise StepFailure(f"card declined for {amount}", code="card_declined", non_retryable=True)
    return {"charged": amount, "attempt": step.attempt}


def conformance(step):
    """The conformance step type, as docs/agent-protocol.md ("Conformance") specifies."""
    cfg = step.config or {}
    mode = cfg.get("mode", "echo")
    if mode == "fail":
        err = cfg.get("error") or {}
        raise StepFailure(err.get("message", "asked to fail"), err.get("code", ""), err.get("non_retryable", False))
    if mode == "sleep":
        step.sleep(cfg.get("sleep_ms", 0) / 1000)
    elif mode != "echo":
        raise StepFailure(f"unknown conformance mode {mode}", "bad_mode", True)
    return {
        "input": step.input, "attempt": step.attempt, "idempotency_key": step.idempotency_key,
        "compensation": step.compensation, "deps": {d: step.deps.get(d) for d in cfg.get("deps", [])},
    }


HANDLERS = {"python.reserve": reserve, "python.release": release, "python.charge": charge, "reeve.conformance": conformance}


# ---- the protocol ----

def ref_key(ref):
    return (ref.namespace, ref.task_id, ref.step, ref.attempt)


class Execution:
    def __init__(self, ref, complete_by, beat_every):
        self.ref = ref
        self.complete_by = complete_by  # seconds since the epoch
        self.abort = threading.Event()
        self.canceled = False
        self.last_beat = 0.0
        self.beat_every = beat_every


class Agent:
    def __init__(self):
        self.id = os.environ.get("REEVE_AGENT_ID") or f"python-{socket.gethostname()}-{os.getpid()}"
        self.namespace = r.NAMESPACE
        self.channel = r.channel()
        self.stub = r.agent_grpc.AgentServiceStub(self.channel)
        self.mu = threading.Lock()
        self.running = {}   # key -> Execution
        self.pending = {}   # key -> (StepResult, complete_by): results not yet acknowledged
        self.out = None     # the send queue of the registered stream, None between streams
        self.draining = False
        self.stopped = threading.Event()
        self.failures = 0

    def run(self):
        """Keeps one stream open until stop; returns False if registration was refused."""
        while not self.stopped.is_set():
            outcome = self.session()
            if outcome == "refused":
                return False
            if self.stopped.is_set():
                break
            if outcome == "drained":
                continue  # reconnect at once
            # Full jitter over 100 ms doubling to 5 s.
            self.failures += 1
            ceiling = min(5.0, 0.1 * 2 ** min(self.failures - 1, 10))
            self.stopped.wait(random.uniform(0.001, ceiling))
        return True

    def session(self):
        q = queue.Queue()
        q.put(r.agent_pb.ConnectRequest(register=self.registration()))

        def requests():
            while True:
                m = q.get()
                if m is None:
                    return  # half-close
                yield m

        call = self.stub.Connect(requests())
        self.call = call
        try:
            for m in call:
                kind = m.WhichOneof("msg")
                if kind == "registered":
                    log("connected", address=r.ADDRESS, session_id=m.registered.session_id, scheduler_id=m.registered.scheduler_id)
                    with self.mu:
                        self.failures = 0
                        self.out = q
                        self.expire_pending()
                        for res, _ in self.pending.values():
                            q.put(r.agent_pb.ConnectRequest(result=res))
                        if self.draining:
                            q.put(r.agent_pb.ConnectRequest(drain=r.agent_pb.Drain(reason="agent shutting down")))
                elif kind == "assignment":
                    self.start(m.assignment)
                elif kind == "cancel":
                    self.cancel(m.cancel.ref)
                elif kind == "result_ack":
                    ack = m.result_ack
                    with self.mu:
                        self.pending.pop(ref_key(ack.ref), None)
                    if not ack.accepted:
                        log("result refused", ref=list(ref_key(ack.ref)), code=ack.status.code, reason=ack.status.message)
                elif kind == "drain":
                    # Move: close this stream, report running steps on the next one.
                    log("scheduler draining; reconnecting", reason=m.drain.reason)
                    self.detach(q)
                    call.cancel()
                    return "drained"
                # Any other kind (or none) is from a newer scheduler: ignore
                # it and keep the stream.
            return "ended"
        except grpc.RpcError as err:
            code = err.code()
            if code == grpc.StatusCode.CANCELLED and self.stopped.is_set():
                return "ended"
            fatal = code in FATAL
            log("registration refused" if fatal else "stream ended; reconnecting", code=code.name, err=err.details())
            return "refused" if fatal else "ended"
        finally:
            self.detach(q)

    def detach(self, q):
        with self.mu:
            if self.out is q:
                self.out = None
        q.put(None)

    def registration(self):
        with self.mu:
            running = [ex.ref for ex in self.running.values()]
            for key, (res, _) in self.pending.items():
                if key not in self.running and len(running) < MAX_CONCURRENT:
                    running.append(res.ref)
        return r.agent_pb.Register(agent_id=self.id, namespace=self.namespace, step_types=list(HANDLERS),
                                   max_concurrent_steps=MAX_CONCURRENT, running=running,
                                   protocol_version=r.agent_pb.PROTOCOL_VERSION_1,
                                   sdk=r.agent_pb.Sdk(name="reeve-python-example", version="0.1.0"))

    def send(self, msg):
        # Without a stream nothing is lost where it matters: results stay
        # pending and are sent again after the next Registered.
        with self.mu:
            if self.out is not None:
                self.out.put(msg)

    def start(self, a):
        key = ref_key(a.ref)
        handler = HANDLERS.get(a.type)
        with self.mu:
            if handler is None or key in self.running or key in self.pending or len(self.running) >= MAX_CONCURRENT:
                log("assignment dropped", ref=list(key), type=a.type)
                return
            hb = r.seconds(a.heartbeat_timeout)
            ex = Execution(a.ref, r.seconds(a.complete_by), min(1.0, hb / 3) if hb > 0 else 1.0)
            self.running[key] = ex
        self.send(r.agent_pb.ConnectRequest(assignment_ack=r.agent_pb.AssignmentAck(ref=a.ref)))
        timer = threading.Timer(max(0.0, ex.complete_by - time.time()), ex.abort.set)
        timer.daemon = True
        timer.start()
        step = Step(self, key, ex, a)
        threading.Thread(target=self.execute, args=(handler, step, key, ex, timer), daemon=True).start()

    def execute(self, handler, step, key, ex, timer):
        try:
            result = r.agent_pb.StepResult(ref=ex.ref, output=r.to_value(handler(step)))
        except Aborted:
            result = None
        except StepFailure as f:
            result = r.agent_pb.StepResult(ref=ex.ref, error=r.task_pb2.StepError(message=str(f), code=f.code, non_retryable=f.non_retryable))
        except Exception as e:  # a bug in a handler is a retryable failure
            result = r.agent_pb.StepResult(ref=ex.ref, error=r.task_pb2.StepError(message=f"{type(e).__name__}: {e}"))
        timer.cancel()
        with self.mu:
            self.running.pop(key, None)
            if result is None or ex.canceled or time.time() >= ex.complete_by:
                log("no result sent: step canceled or past its complete_by", ref=list(key))
                return
            self.pending[key] = (result, ex.complete_by)
        self.send(r.agent_pb.ConnectRequest(result=result))

    def heartbeat(self, key, ex):
        now = time.monotonic()
        with self.mu:
            if self.running.get(key) is not ex or now - ex.last_beat < ex.beat_every:
                return
            ex.last_beat = now
        self.send(r.agent_pb.ConnectRequest(heartbeat=r.agent_pb.Heartbeat(refs=[ex.ref])))

    def cancel(self, ref):
        key = ref_key(ref)
        with self.mu:
            ex = self.running.get(key)
            if ex is not None:
                ex.canceled = True
                ex.abort.set()
            self.pending.pop(key, None)

    def expire_pending(self):
        """Results past their complete_by may no longer be sent (call with mu held)."""
        now = time.time()
        for key in [k for k, (_, cb) in self.pending.items() if now >= cb]:
            del self.pending[key]

    def shutdown(self, timeout):
        """Sends Drain, waits (at most timeout seconds) for running steps and their acks, then closes."""
        with self.mu:
            self.draining = True
        self.send(r.agent_pb.ConnectRequest(drain=r.agent_pb.Drain(reason="agent shutting down")))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.mu:
                self.expire_pending()
                if not self.running and not self.pending:
                    break
            time.sleep(0.05)
        with self.mu:
            for ex in self.running.values():
                ex.abort.set()
            q = self.out
            self.out = None
        self.stopped.set()
        if q is not None:
            q.put(None)  # end the stream: half-close, then the scheduler ends it
        call = getattr(self, "call", None)
        if call is not None:
            # Give the scheduler a moment to see the half-close, then cancel.
            end = time.monotonic() + 2
            while call.is_active() and time.monotonic() < end:
                time.sleep(0.02)
            call.cancel()
        self.channel.close()


def main():
    agent = Agent()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    log("agent starting", address=r.ADDRESS, agent_id=agent.id, step_types=list(HANDLERS))
    result = {}
    runner = threading.Thread(target=lambda: result.update(ok=agent.run()), daemon=True)
    runner.start()
    while not stop.is_set() and runner.is_alive():
        stop.wait(0.1)
    if stop.is_set():
        agent.shutdown(30)
    runner.join(10)
    return 0 if result.get("ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())
