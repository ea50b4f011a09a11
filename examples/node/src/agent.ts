// A Reeve agent written against the generated stubs only, speaking the raw
// agent protocol of docs/agent-protocol.md: register, ack, run, report before
// complete_by, redeliver unacknowledged results after a reconnect, obey
// CancelStep and Drain, heartbeat, and shut down gracefully on SIGTERM.
//
// It handles two step types: "node.greet" (the example) and
// "reeve.conformance" (so that `reeve conformance` can check it).
//
//   REEVE_ADDRESS=127.0.0.1:7430 node dist/agent.js
import * as os from 'node:os';
import * as grpc from '@grpc/grpc-js';

import { address, channelOptions, credentials, durationMillis, fromValue, Json, loadAgentService, millis, toValue } from './reeve';
import type { ConnectRequest } from './gen/reeve/v1/ConnectRequest';
import type { ConnectResponse__Output } from './gen/reeve/v1/ConnectResponse';
import type { StepAssignment__Output } from './gen/reeve/v1/StepAssignment';
import type { StepError } from './gen/reeve/v1/StepError';
import type { StepRef__Output } from './gen/reeve/v1/StepRef';
import type { StepResult } from './gen/reeve/v1/StepResult';

/** One execution of a step, as a handler sees it. */
export interface Step {
  ref: StepRef__Output;
  type: string;
  attempt: number;
  input: Json;
  config: Json;
  deps: { [step: string]: Json };
  idempotencyKey: string;
  compensation: boolean;
  completeBy: number; // ms since the epoch
  /** aborted at complete_by or on CancelStep: stop working, nothing will be reported. */
  signal: AbortSignal;
  /** tells the scheduler the step is alive; coalesced, call it as often as you like. */
  heartbeat(): void;
}

/** A failure with a code matched against the retry policy's non_retryable_error_codes. */
export class StepFailure extends Error {
  constructor(message: string, readonly code = '', readonly nonRetryable = false) {
    super(message);
  }
}

type Handler = (step: Step) => Promise<Json>;

// The agent protocol version this agent speaks (Register.protocol_version).
const PROTOCOL_VERSION = 1;

// ---- step handlers ----

const handlers: { [type: string]: Handler } = {
  'node.greet': async (step) => {
    const name = (step.input as { name?: string } | null)?.name ?? 'world';
    return { greeting: `Hello, ${name}!`, from: 'node', attempt: step.attempt };
  },
  'reeve.conformance': conformance,
};

function sleep(ms: number, signal: AbortSignal, tick?: () => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = setTimeout(finish, ms);
    const beat = tick ? setInterval(tick, 50) : undefined;
    function finish() {
      clearTimeout(done);
      if (beat) clearInterval(beat);
      signal.removeEventListener('abort', abort);
      resolve();
    }
    function abort() {
      clearTimeout(done);
      if (beat) clearInterval(beat);
      reject(signal.reason ?? new Error('aborted'));
    }
    if (signal.aborted) return abort();
    signal.addEventListener('abort', abort, { once: true });
  });
}

// The conformance step type: behaviour chosen by the suite through config
// (docs/agent-protocol.md, "Conformance").
async function conformance(step: Step): Promise<Json> {
  const cfg = (step.config ?? {}) as {
    mode?: string; sleep_ms?: number; deps?: string[];
    error?: { code?: string; message?: string; non_retryable?: boolean };
  };
  switch (cfg.mode ?? 'echo') {
    case 'echo':
      break;
    case 'fail':
      throw new StepFailure(cfg.error?.message ?? 'asked to fail', cfg.error?.code ?? '', cfg.error?.non_retryable ?? false);
    case 'sleep':
      await sleep(cfg.sleep_ms ?? 0, step.signal, step.heartbeat);
      break;
    default:
      throw new StepFailure(`unknown conformance mode ${cfg.mode}`, 'bad_mode', true);
  }
  const deps: { [k: string]: Json } = {};
  for (const name of cfg.deps ?? []) deps[name] = step.deps[name] ?? null;
  return {
    input: step.input, attempt: step.attempt, idempotency_key: step.idempotencyKey,
    compensation: step.compensation, deps,
  };
}

// ---- the protocol ----

interface Execution {
  ref: StepRef__Output;
  completeBy: number;
  abort: AbortController;
  timer: NodeJS.Timeout;
  canceled: boolean;
  lastBeat: number;
  beatEvery: number;
}

interface Pending {
  result: StepResult;
  completeBy: number;
}

const refKey = (r: StepRef__Output | undefined) => `${r?.namespace}/${r?.taskId}/${r?.step}/${r?.attempt}`;
const log = (msg: string, fields: object = {}) =>
  console.error(JSON.stringify({ time: new Date().toISOString(), msg, ...fields }));

class Agent {
  readonly id = process.env.REEVE_AGENT_ID ?? `node-${os.hostname()}-${process.pid}`;
  readonly namespace = process.env.REEVE_NAMESPACE ?? 'default';
  readonly maxConcurrent = 16;

  private readonly client;
  private running = new Map<string, Execution>();
  private pending = new Map<string, Pending>(); // results not yet acknowledged
  private stream: grpc.ClientDuplexStream<ConnectRequest, ConnectResponse__Output> | undefined;
  private draining = false;
  private stopped = false;
  private failures = 0;

  constructor(addr: string) {
    const proto = loadAgentService();
    this.client = new proto.reeve.v1.AgentService(addr, credentials, channelOptions);
  }

  /** run keeps one stream open until stop(); it resolves false if registration was refused. */
  async run(): Promise<boolean> {
    while (!this.stopped) {
      const outcome = await this.session();
      if (outcome === 'refused') return false;
      if (this.stopped) break;
      if (outcome === 'drained') continue; // reconnect at once
      // Full jitter over 100ms doubling to 5s.
      this.failures++;
      const ceiling = Math.min(5000, 100 * 2 ** Math.min(this.failures - 1, 10));
      await new Promise((r) => setTimeout(r, 1 + Math.random() * ceiling));
    }
    return true;
  }

  private session(): Promise<'ended' | 'drained' | 'refused'> {
    return new Promise((resolve) => {
      const call = this.client.Connect();
      let settled = false;
      const settle = (how: 'ended' | 'drained' | 'refused') => {
        if (this.stream === call) this.stream = undefined;
        if (!settled) { settled = true; resolve(how); }
      };
      call.on('data', (m: ConnectResponse__Output) => {
        switch (m.msg) {
          case 'registered':
            log('connected', { address, session_id: m.registered?.sessionId, scheduler_id: m.registered?.schedulerId });
            this.failures = 0;
            this.stream = call;
            this.expirePending();
            for (const p of this.pending.values()) this.send({ result: p.result });
            if (this.draining) this.send({ drain: { reason: 'agent shutting down' } });
            break;
          case 'assignment':
            this.start(m.assignment!);
            break;
          case 'cancel':
            this.cancel(m.cancel!.ref);
            break;
          case 'resultAck': {
            const ack = m.resultAck!;
            this.pending.delete(refKey(ack.ref));
            if (!ack.accepted) log('result refused', { ref: refKey(ack.ref), code: ack.status?.code ?? 0, reason: ack.status?.message ?? '' });
            break;
          }
          case 'drain':
            // Move: close this stream, report running steps on the next one.
            log('scheduler draining; reconnecting', { reason: m.drain?.reason });
            this.stream = undefined;
            call.end();
            settle('drained');
            break;
          default:
            // A message kind from a newer scheduler: ignore it, keep the stream.
            break;
        }
      });
      call.on('error', (err: grpc.ServiceError) => {
        const fatal = [grpc.status.INVALID_ARGUMENT, grpc.status.PERMISSION_DENIED, grpc.status.UNAUTHENTICATED].includes(err.code);
        if (!settled) log(fatal ? 'registration refused' : 'stream ended; reconnecting', { code: err.code, err: err.details });
        settle(fatal ? 'refused' : 'ended');
      });
      call.on('end', () => settle('ended'));
      call.on('close', () => settle('ended'));
      call.write({ register: this.registration() });
    });
  }

  private registration() {
    const running = [...this.running.values()].map((e) => e.ref);
    for (const [key, p] of this.pending) {
      if (!this.running.has(key) && running.length < this.maxConcurrent) running.push(p.result.ref as StepRef__Output);
    }
    return {
      agentId: this.id, namespace: this.namespace, stepTypes: Object.keys(handlers), maxConcurrentSteps: this.maxConcurrent, running,
      protocolVersion: PROTOCOL_VERSION, sdk: { name: 'reeve-node-example', version: '0.1.0' },
    };
  }

  private send(m: ConnectRequest) {
    // Without a stream the message is not lost where it matters: results
    // stay pending and are sent again after the next Registered.
    this.stream?.write(m);
  }

  private start(a: StepAssignment__Output) {
    const ref = a.ref!;
    const key = refKey(ref);
    const handler = handlers[a.type ?? ''];
    if (!handler || this.running.has(key) || this.pending.has(key) || this.running.size >= this.maxConcurrent) {
      log('assignment dropped', { ref: key, type: a.type });
      return;
    }
    this.send({ assignmentAck: { ref } });
    const completeBy = millis(a.completeBy);
    const abort = new AbortController();
    const hb = durationMillis(a.heartbeatTimeout);
    const ex: Execution = {
      ref, completeBy, abort, canceled: false, lastBeat: 0,
      beatEvery: hb > 0 ? Math.min(1000, hb / 3) : 1000,
      timer: setTimeout(() => abort.abort(new Error('complete_by passed')), Math.max(0, completeBy - Date.now())),
    };
    this.running.set(key, ex);
    const deps: { [k: string]: Json } = {};
    for (const [k, v] of Object.entries(a.dependencyOutputs ?? {})) deps[k] = fromValue(v);
    const step: Step = {
      ref, type: a.type ?? '', attempt: ref.attempt ?? 0, input: fromValue(a.input), config: fromValue(a.config), deps,
      idempotencyKey: a.idempotencyKey ?? '', compensation: a.compensation ?? false, completeBy, signal: abort.signal,
      heartbeat: () => {
        if (this.running.get(key) !== ex || Date.now() - ex.lastBeat < ex.beatEvery) return;
        ex.lastBeat = Date.now();
        this.send({ heartbeat: { refs: [ref] } });
      },
    };
    handler(step).then(
      (out) => this.finish(key, ex, { ref, output: toValue(out) }),
      (err) => this.finish(key, ex, { ref, error: stepError(err) }),
    );
  }

  private finish(key: string, ex: Execution, result: StepResult) {
    clearTimeout(ex.timer);
    this.running.delete(key);
    // Aborted means canceled or past complete_by: Node's timer can fire a
    // millisecond before Date.now() reaches complete_by, so the clock alone
    // would let the aborted step's error through.
    if (ex.canceled || ex.abort.signal.aborted || Date.now() >= ex.completeBy) {
      log('no result sent: step canceled or past its complete_by', { ref: key });
      return;
    }
    this.pending.set(key, { result, completeBy: ex.completeBy });
    this.send({ result });
  }

  private cancel(ref: StepRef__Output | undefined) {
    const key = refKey(ref);
    const ex = this.running.get(key);
    if (ex) {
      ex.canceled = true;
      ex.abort.abort(new Error('canceled'));
    }
    this.pending.delete(key);
  }

  // Results past their complete_by may no longer be sent.
  private expirePending() {
    const now = Date.now();
    for (const [key, p] of this.pending) if (now >= p.completeBy) this.pending.delete(key);
  }

  /** shutdown sends Drain, waits (at most timeoutMs) for running steps and their acks, then closes. */
  async shutdown(timeoutMs: number) {
    this.draining = true;
    this.send({ drain: { reason: 'agent shutting down' } });
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      this.expirePending();
      if (this.running.size === 0 && this.pending.size === 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    for (const ex of this.running.values()) ex.abort.abort(new Error('agent shutting down'));
    this.stopped = true;
    this.stream?.end();
    this.client.close();
  }
}

function stepError(err: unknown): StepError {
  if (err instanceof StepFailure) return { message: err.message, code: err.code, nonRetryable: err.nonRetryable };
  return { message: err instanceof Error ? err.message : String(err) };
}

async function main() {
  const agent = new Agent(address);
  let stopping: Promise<void> | undefined;
  const stop = () => { stopping ??= agent.shutdown(30_000); };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  log('agent starting', { address, agent_id: agent.id, step_types: Object.keys(handlers) });
  const ok = await agent.run();
  await stopping;
  process.exit(ok ? 0 : 1);
}

main().catch((err) => {
  log('agent failed', { err: String(err) });
  process.exit(1);
});
