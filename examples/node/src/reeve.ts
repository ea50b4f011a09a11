// Shared plumbing: load the Reeve API from proto/ at runtime with
// @grpc/proto-loader, typed by the interfaces proto-loader-gen-types
// generated into src/gen (npm run generate), and convert between JSON and
// google.protobuf.Value / Timestamp / Duration.
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

import type { ProtoGrpcType as AgentProto } from './gen/agent_service';
import type { ProtoGrpcType as SchedulerProto } from './gen/scheduler_service';
import type { Value, Value__Output } from './gen/google/protobuf/Value';
import type { Timestamp__Output } from './gen/google/protobuf/Timestamp';
import type { Duration__Output } from './gen/google/protobuf/Duration';

// The repository's proto/ directory; REEVE_PROTO_DIR overrides it.
const protoDir = process.env.REEVE_PROTO_DIR ?? path.resolve(__dirname, '..', '..', '..', 'proto');

// These options must match the flags of `npm run generate`.
const loaderOptions: protoLoader.Options = {
  keepCase: false,
  longs: String,
  enums: String,
  oneofs: true,
  includeDirs: [protoDir],
};

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** address is the scheduler's host:port: REEVE_ADDRESS, else 127.0.0.1:7430. */
export const address = process.env.REEVE_ADDRESS ?? '127.0.0.1:7430';

export function loadAgentService(): AgentProto {
  const def = protoLoader.loadSync('reeve/v1/agent_service.proto', loaderOptions);
  return grpc.loadPackageDefinition(def) as unknown as AgentProto;
}

export function loadSchedulerService(): SchedulerProto {
  const def = protoLoader.loadSync('reeve/v1/scheduler_service.proto', loaderOptions);
  return grpc.loadPackageDefinition(def) as unknown as SchedulerProto;
}

/** toValue converts JSON into a google.protobuf.Value. */
export function toValue(v: Json | undefined): Value {
  if (v === null || v === undefined) return { nullValue: 'NULL_VALUE' };
  if (typeof v === 'boolean') return { boolValue: v };
  if (typeof v === 'number') return { numberValue: v };
  if (typeof v === 'string') return { stringValue: v };
  if (Array.isArray(v)) return { listValue: { values: v.map(toValue) } };
  const fields: { [key: string]: Value } = {};
  for (const [k, x] of Object.entries(v)) fields[k] = toValue(x);
  return { structValue: { fields } };
}

/** fromValue converts a google.protobuf.Value (absent: null) into JSON. */
export function fromValue(v: Value__Output | null | undefined): Json {
  if (!v) return null;
  switch (v.kind) {
    case 'boolValue': return v.boolValue ?? false;
    case 'numberValue': return v.numberValue ?? 0;
    case 'stringValue': return v.stringValue ?? '';
    case 'listValue': return (v.listValue?.values ?? []).map(fromValue);
    case 'structValue': {
      const out: { [key: string]: Json } = {};
      for (const [k, x] of Object.entries(v.structValue?.fields ?? {})) out[k] = fromValue(x);
      return out;
    }
    default: return null;
  }
}

/** millis converts a google.protobuf.Timestamp into milliseconds since the epoch. */
export function millis(t: Timestamp__Output | null | undefined): number {
  if (!t) return 0;
  return Number(t.seconds ?? 0) * 1000 + Math.floor((t.nanos ?? 0) / 1e6);
}

/** durationMillis converts a google.protobuf.Duration into milliseconds. */
export function durationMillis(d: Duration__Output | null | undefined): number {
  if (!d) return 0;
  return Number(d.seconds ?? 0) * 1000 + Math.floor((d.nanos ?? 0) / 1e6);
}

/** The keepalive the scheduler admits (pings no more often than every 10s). */
export const channelOptions: grpc.ChannelOptions = {
  'grpc.keepalive_time_ms': 30_000,
  'grpc.keepalive_timeout_ms': 10_000,
  'grpc.keepalive_permit_without_calls': 1,
  ...(process.env.REEVE_TLS_SERVER_NAME ? { 'grpc.ssl_target_name_override': process.env.REEVE_TLS_SERVER_NAME } : {}),
};

/**
 * credentials follow the reeve CLI's environment (docs/security.md):
 * plaintext unless REEVE_TLS=1 or REEVE_TLS_CA is set; REEVE_TLS_CERT and
 * REEVE_TLS_KEY add a client certificate (mutual TLS); REEVE_TOKEN adds a
 * bearer token (over TLS only).
 */
export const credentials = makeCredentials(process.env);

function makeCredentials(env: NodeJS.ProcessEnv): grpc.ChannelCredentials {
  const read = (file: string | undefined) => (file ? fs.readFileSync(file) : null);
  if (env.REEVE_TLS !== '1' && !env.REEVE_TLS_CA) {
    if (env.REEVE_TOKEN) throw new Error('REEVE_TOKEN needs TLS: set REEVE_TLS=1 or REEVE_TLS_CA');
    return grpc.credentials.createInsecure();
  }
  const tls = grpc.credentials.createSsl(read(env.REEVE_TLS_CA), read(env.REEVE_TLS_KEY), read(env.REEVE_TLS_CERT));
  const token = env.REEVE_TOKEN;
  if (!token) return tls;
  return grpc.credentials.combineChannelCredentials(tls, grpc.credentials.createFromMetadataGenerator((_params, done) => {
    const md = new grpc.Metadata();
    md.set('authorization', `Bearer ${token}`);
    done(null, md);
  }));
}
