#!/usr/bin/python3
"""A Reeve client from the generated stubs: register a workflow whose steps
run on the Python agent, submit a task with an id (idempotent: submitting the
same id again returns the same task), watch it to the end and print its
history.

    REEVE_ADDRESS=127.0.0.1:7430 python3 client.py [--id ID] [--amount N] [--expect STATE] [traveller]

The workflow python.trip reserves a seat (compensated by releasing it), then
charges the amount; a charge above 100 is declined (a non-retryable error),
so the task compensates: the reservation is released. Exits 0 when the task
ended in --expect (default TASK_STATE_SUCCEEDED), 1 otherwise.
"""

import argparse
import sys
import time
import uuid

import grpc

import reeve_grpc as r

WORKFLOW = r.workflow_pb2.Workflow(
    name="python.trip",
    description="Reserve a seat, then charge; a declined charge releases the seat (run by the Python example agent).",
    steps=[
        r.workflow_pb2.StepSpec(
            name="reserve", type="python.reserve",
            timeout={"seconds": 10},
            compensation=r.workflow_pb2.CompensationSpec(type="python.release", timeout={"seconds": 10}),
        ),
        r.workflow_pb2.StepSpec(
            name="charge", type="python.charge", depends_on=["reserve"],
            timeout={"seconds": 10},
            retry_policy=r.workflow_pb2.RetryPolicy(max_attempts=3, initial_backoff={"nanos": 100_000_000},
                                                    non_retryable_error_codes=["card_declined"]),
            escalation=r.workflow_pb2.ESCALATION_COMPENSATE,
        ),
    ],
)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traveller", nargs="?", default="Ada")
    p.add_argument("--id", default="", help="task id (default: a new one)")
    p.add_argument("--amount", type=float, default=42)
    p.add_argument("--expect", default="TASK_STATE_SUCCEEDED", help="the final state that makes the exit code 0")
    p.add_argument("--timeout", type=float, default=60, help="seconds to watch the task")
    args = p.parse_args()
    task_id = args.id or f"py-{uuid.uuid4()}"

    with r.channel() as ch:
        client = r.sched_grpc.SchedulerServiceStub(ch)
        # Registering an identical definition again is a no-op.
        reg = client.RegisterWorkflow(r.sched_pb.RegisterWorkflowRequest(workflow=WORKFLOW), timeout=10)
        print(f"workflow {reg.workflow.name} version {reg.workflow.version}{' (new)' if reg.created else ''}")

        sub = client.SubmitTask(r.sched_pb.SubmitTaskRequest(
            namespace=r.NAMESPACE, task_id=task_id,
            workflow_ref=r.sched_pb.WorkflowRef(name=WORKFLOW.name),
            input=r.to_value({"traveller": args.traveller, "amount": args.amount}),
        ), timeout=10)
        print(f"submitted task {sub.task.id}")

        task = watch(client, sub.task.id, args.timeout)
        for s in task.steps:
            out = r.from_value(s, "output")
            print(f"step {s.name}: {r.task_pb2.StepState.Name(s.state)} output {out}")
        print("history:")
        for e in task.history:
            t = time.strftime("%H:%M:%S", time.gmtime(e.time.seconds)) + f".{e.time.nanos // 1_000_000:03d}"
            where = f" {e.step}#{e.attempt}" if e.step else ""
            print(f"  {t} {e.kind}{where} by {e.actor}{': ' + e.message if e.message else ''}")
        state = r.task_pb2.TaskState.Name(task.state)
        print(f"task {task.id} ended {state}")
        return 0 if state == args.expect else 1


def watch(client, task_id, timeout):
    """Follow the task with WatchTask until it is terminal; reconnect if the
    stream breaks (a scheduler restart), bounded by timeout seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            stream = client.WatchTask(r.sched_pb.WatchTaskRequest(namespace=r.NAMESPACE, task_id=task_id),
                                      timeout=max(0.1, deadline - time.monotonic()))
            for m in stream:
                last = m.task
                steps = " ".join(f"{s.name}={r.task_pb2.StepState.Name(s.state).removeprefix('STEP_STATE_')}" for s in last.steps)
                print(f"task {last.id}: {r.task_pb2.TaskState.Name(last.state)} {steps}")
            if last is not None:
                return last
            raise RuntimeError("watch ended without a task")
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except grpc.RpcError as err:
        print(f"client: {err.details()} ({err.code().name})", file=sys.stderr)
        sys.exit(1)
