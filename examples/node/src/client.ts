// A Reeve client from the generated stubs: register a workflow whose step
// runs on the Node agent, submit a task, and watch it to the end.
//
//   REEVE_ADDRESS=127.0.0.1:7430 node dist/client.js [name]
//
// Exits 0 when the task SUCCEEDED, 1 otherwise.
import * as grpc from '@grpc/grpc-js';

import { address, channelOptions, credentials, fromValue, loadSchedulerService, toValue } from './reeve';
import type { RegisterWorkflowRequest } from './gen/reeve/v1/RegisterWorkflowRequest';
import type { RegisterWorkflowResponse__Output } from './gen/reeve/v1/RegisterWorkflowResponse';
import type { SubmitTaskRequest } from './gen/reeve/v1/SubmitTaskRequest';
import type { SubmitTaskResponse__Output } from './gen/reeve/v1/SubmitTaskResponse';
import type { Task__Output } from './gen/reeve/v1/Task';
import type { WatchTaskResponse__Output } from './gen/reeve/v1/WatchTaskResponse';

const proto = loadSchedulerService();
const client = new proto.reeve.v1.SchedulerService(address, credentials, channelOptions);

// Every unary call is bounded by a deadline.
const opts = (): grpc.CallOptions => ({ deadline: Date.now() + 10_000 });

function registerWorkflow(req: RegisterWorkflowRequest): Promise<RegisterWorkflowResponse__Output> {
  return new Promise((resolve, reject) => {
    client.RegisterWorkflow(req, opts(), (err, res) => (err ? reject(err) : resolve(res!)));
  });
}

function submitTask(req: SubmitTaskRequest): Promise<SubmitTaskResponse__Output> {
  return new Promise((resolve, reject) => {
    client.SubmitTask(req, opts(), (err, res) => (err ? reject(err) : resolve(res!)));
  });
}

function watch(taskId: string, timeoutMs: number): Promise<Task__Output> {
  return new Promise((resolve, reject) => {
    let last: Task__Output | undefined;
    const stream = client.WatchTask({ taskId }, { deadline: Date.now() + timeoutMs });
    stream.on('data', (m: WatchTaskResponse__Output) => {
      const t = m.task!;
      last = t;
      const steps = (t.steps ?? []).map((s) => `${s.name}=${s.state?.replace('STEP_STATE_', '')}`).join(' ');
      console.log(`task ${t.id}: ${t.state} ${steps}`);
    });
    stream.on('error', reject);
    stream.on('end', () => (last ? resolve(last) : reject(new Error('watch ended without a task'))));
  });
}

async function main() {
  const name = process.argv[2] ?? 'Reeve';
  // Registering an identical definition again is a no-op.
  const reg = await registerWorkflow({
    workflow: {
      name: 'node.greet',
      description: 'One step run by the Node example agent.',
      steps: [{ name: 'greet', type: 'node.greet', timeout: { seconds: 10 } }],
    },
  });
  console.log(`workflow ${reg.workflow?.name} version ${reg.workflow?.version}`);

  const sub = await submitTask({ workflowRef: { name: 'node.greet' }, input: toValue({ name }) });
  const id = sub.task!.id!;
  console.log(`submitted task ${id}`);

  const task = await watch(id, 60_000);
  for (const s of task.steps ?? []) {
    console.log(`step ${s.name}: ${s.state} output ${JSON.stringify(fromValue(s.output))}`);
  }
  client.close();
  process.exit(task.state === 'TASK_STATE_SUCCEEDED' ? 0 : 1);
}

main().catch((err) => {
  console.error(`client: ${err.message ?? err}`);
  process.exit(1);
});
