#!/usr/bin/python3
"""Steps completed from outside (issue 35), from the generated stubs: submit
a task whose only step waits for an approval (waitFor: external, no agent),
then complete it by name (the admin or approver role) or, with --by-token,
by its completion token (read with GetCompletionToken, as a service that
mails approval links would; the token alone is then enough, any
authenticated identity may use it). Send the same completion twice: the
second is answered as the first ("repeated"). --reject CODE fails the step
for good instead.

    REEVE_ADDRESS=127.0.0.1:7430 python3 approval.py [--id ID] [--by-token] [--reject CODE]

Exits 0 when the task ended SUCCEEDED (FAILED with --reject), 1 otherwise.
"""

import argparse
import sys
import time
import uuid

import grpc

import reeve_grpc as r

WORKFLOW = r.workflow_pb2.Workflow(
    name="python.approval",
    description="One step that waits for a person's approval (completed from outside, up to 2 days).",
    steps=[
        r.workflow_pb2.StepSpec(name="approve", wait_for="external", timeout={"seconds": 2 * 24 * 3600}),
    ],
)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--id", default="", help="task id (default: a new one)")
    p.add_argument("--by-token", action="store_true", help="complete with the step's token instead of by name")
    p.add_argument("--reject", default="", metavar="CODE", help="fail the step with this error code")
    args = p.parse_args()
    task_id = args.id or f"py-approval-{uuid.uuid4()}"

    with r.channel() as ch:
        client = r.sched_grpc.SchedulerServiceStub(ch)
        client.SubmitTask(r.sched_pb.SubmitTaskRequest(
            namespace=r.NAMESPACE, task_id=task_id,
            inline_workflow=WORKFLOW, input=r.to_value({"order": task_id}),
        ), timeout=10)
        print(f"submitted task {task_id}")

        # The step waits (WAITING) as soon as the task starts.
        deadline = time.monotonic() + 30
        while True:
            step = client.GetTask(r.sched_pb.GetTaskRequest(namespace=r.NAMESPACE, task_id=task_id), timeout=10).task.steps[0]
            if step.state == r.task_pb2.STEP_STATE_WAITING:
                break
            if time.monotonic() > deadline:
                sys.exit(f"step {step.name} is {r.task_pb2.StepState.Name(step.state)}, not WAITING")
            time.sleep(0.1)
        print(f"step approve waits since {time.strftime('%H:%M:%S', time.gmtime(step.wait_start_time.seconds))}, "
              f"complete-by {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(step.complete_by.seconds))}")

        req = r.sched_pb.CompleteStepRequest()
        if args.by_token:
            tok = client.GetCompletionToken(r.sched_pb.GetCompletionTokenRequest(
                namespace=r.NAMESPACE, task_id=task_id, step="approve"), timeout=10)
            req.token = tok.token  # a secret: pass it on, never log it
        else:
            req.namespace, req.task_id, req.step = r.NAMESPACE, task_id, "approve"
        if args.reject:
            req.error.code, req.error.message = args.reject, "rejected by the Python example"
        else:
            req.output.CopyFrom(r.to_value({"approved_by": "python-example"}))

        for n in (1, 2):  # the second is a repeat: answered as the first, nothing changes
            resp = client.CompleteStep(req, timeout=10)
            print(f"completion {n}: step {resp.ref.step} attempt {resp.ref.attempt} "
                  f"{r.task_pb2.StepState.Name(resp.state)} repeated={resp.repeated}")

        task = client.GetTask(r.sched_pb.GetTaskRequest(namespace=r.NAMESPACE, task_id=task_id), timeout=10).task
        state = r.task_pb2.TaskState.Name(task.state)
        print(f"task {task.id} ended {state}: approve output {r.from_value(task.steps[0], 'output')}")
        want = "TASK_STATE_FAILED" if args.reject else "TASK_STATE_SUCCEEDED"
        return 0 if state == want else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except grpc.RpcError as err:
        print(f"approval: {err.details()} ({err.code().name})", file=sys.stderr)
        sys.exit(1)
