// Steps completed from outside (issue 35), from the generated stubs: submit
// a task whose only step waits for an approval (waitFor: external, no
// agent), then complete it by name (the admin or approver role) or, with
// --by-token, by its completion token (GetCompletionToken, as a service that
// mails approval links would; the token alone is then enough). The same
// completion is sent twice: the second is answered as the first
// (repeated) and changes nothing. --reject CODE fails the step instead.
//
//   REEVE_ADDRESS=127.0.0.1:7430 node dist/approval.js [--by-token] [--reject CODE]
//
// Exits 0 when the task ended SUCCEEDED (FAILED with --reject), 1 otherwise.
import * as grpc from '@grpc/grpc-js';

import { address, channelOptions, credentials, fromValue, loadSchedulerService, toValue } from './reeve';
import type { CompleteStepRequest } from './gen/reeve/v1/CompleteStepRequest';
import type { CompleteStepResponse__Output } from './gen/reeve/v1/CompleteStepResponse';
import type { GetCompletionTokenResponse__Output } from './gen/reeve/v1/GetCompletionTokenResponse';
import type { SubmitTaskRequest } from './gen/reeve/v1/SubmitTaskRequest';
import type { SubmitTaskResponse__Output } from './gen/reeve/v1/SubmitTaskResponse';
import type { Task__Output } from './gen/reeve/v1/Task';

const proto = loadSchedulerService();
const client = new proto.reeve.v1.SchedulerService(address, credentials, channelOptions);
const namespace = process.env.REEVE_NAMESPACE ?? 'default';

// Every unary call is bounded by a deadline.
const opts = (): grpc.CallOptions => ({ deadline: Date.now() + 10_000 });

function getTask(taskId: string): Promise<Task__Output> {
  return new Promise((resolve, reject) => {
    client.GetTask({ namespace, taskId }, opts(), (err, res) => (err ? reject(err) : resolve(res!.task!)));
  });
}

function submitTask(req: SubmitTaskRequest): Promise<SubmitTaskResponse__Output> {
  return new Promise((resolve, reject) => {
    client.SubmitTask(req, opts(), (err, res) => (err ? reject(err) : resolve(res!)));
  });
}

function completionToken(taskId: string, step: string): Promise<GetCompletionTokenResponse__Output> {
  return new Promise((resolve, reject) => {
    client.GetCompletionToken({ namespace, taskId, step }, opts(), (err, res) => (err ? reject(err) : resolve(res!)));
  });
}

function completeStep(req: CompleteStepRequest): Promise<CompleteStepResponse__Output> {
  return new Promise((resolve, reject) => {
    client.CompleteStep(req, opts(), (err, res) => (err ? reject(err) : resolve(res!)));
  });
}

async function main() {
  const byToken = process.argv.includes('--by-token');
  const i = process.argv.indexOf('--reject');
  const reject = i > 0 ? process.argv[i + 1] : '';
  const taskId = `node-approval-${Date.now()}`;

  await submitTask({
    namespace, taskId, input: toValue({ order: taskId }),
    inlineWorkflow: {
      name: 'node.approval',
      steps: [{ name: 'approve', waitFor: 'external', timeout: { seconds: 2 * 24 * 3600 } }],
    },
  });
  console.log(`submitted task ${taskId}`);

  // The step waits (WAITING) as soon as the task starts.
  const deadline = Date.now() + 30_000;
  for (;;) {
    const s = (await getTask(taskId)).steps?.[0];
    if (!s) throw new Error('the task has no step');
    if (s.state === 'STEP_STATE_WAITING') {
      console.log(`step approve waits, complete-by ${new Date(Number(s.completeBy!.seconds) * 1000).toISOString()}`);
      break;
    }
    if (Date.now() > deadline) throw new Error(`step approve is ${s.state}, not WAITING`);
    await new Promise((r) => setTimeout(r, 100));
  }

  const req: CompleteStepRequest = {};
  if (byToken) {
    const tok = await completionToken(taskId, 'approve');
    req.token = tok.token; // a secret: pass it on, never log it
  } else {
    Object.assign(req, { namespace, taskId, step: 'approve' });
  }
  if (reject) req.error = { code: reject, message: 'rejected by the Node example' };
  else req.output = toValue({ approvedBy: 'node-example' });

  for (const n of [1, 2]) { // the second is a repeat: answered as the first, nothing changes
    const res = await completeStep(req);
    console.log(`completion ${n}: step ${res.ref?.step} attempt ${res.ref?.attempt} ${res.state} repeated=${res.repeated ?? false}`);
  }

  const task = await getTask(taskId);
  console.log(`task ${task.id} ended ${task.state}: approve output ${JSON.stringify(fromValue(task.steps?.[0]?.output))}`);
  client.close();
  process.exit(task.state === (reject ? 'TASK_STATE_FAILED' : 'TASK_STATE_SUCCEEDED') ? 0 : 1);
}

main().catch((err) => {
  console.error(`approval: ${err.message ?? err}`);
  process.exit(1);
});
