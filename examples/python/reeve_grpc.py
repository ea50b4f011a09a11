"""Shared plumbing of the Python example: the generated stubs, channel
credentials from the reeve CLI's environment, and JSON <-> protobuf
conversions.

The stubs are generated from proto/ into ./gen by `make python-example`
(grpc_tools.protoc; not committed). Use Debian's python3 with
python3-grpcio, python3-grpc-tools and python3-protobuf.
"""

import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_gen = os.path.join(_here, "gen")
if not os.path.isdir(os.path.join(_gen, "reeve", "v1")):
    sys.exit("examples/python/gen is missing: run `make python-example` to generate the stubs from proto/")
sys.path.insert(0, _gen)

import grpc  # noqa: E402
from google.protobuf import json_format, struct_pb2  # noqa: E402

from reeve.v1 import agent_service_pb2 as agent_pb  # noqa: E402,F401
from reeve.v1 import agent_service_pb2_grpc as agent_grpc  # noqa: E402,F401
from reeve.v1 import scheduler_service_pb2 as sched_pb  # noqa: E402,F401
from reeve.v1 import scheduler_service_pb2_grpc as sched_grpc  # noqa: E402,F401
from reeve.v1 import task_pb2  # noqa: E402,F401
from reeve.v1 import workflow_pb2  # noqa: E402,F401

# The scheduler's host:port: REEVE_ADDRESS, else 127.0.0.1:7430.
ADDRESS = os.environ.get("REEVE_ADDRESS", "127.0.0.1:7430")
NAMESPACE = os.environ.get("REEVE_NAMESPACE", "default")

# The keepalive the scheduler admits (client pings no more often than 10 s).
_OPTIONS = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
]


def channel():
    """A channel to ADDRESS, secured as the reeve CLI would be (docs/security.md):
    plaintext unless REEVE_TLS=1 or REEVE_TLS_CA is set; REEVE_TLS_CERT and
    REEVE_TLS_KEY add a client certificate; REEVE_TOKEN a bearer token (TLS only)."""
    env = os.environ
    options = list(_OPTIONS)
    if env.get("REEVE_TLS_SERVER_NAME"):
        options.append(("grpc.ssl_target_name_override", env["REEVE_TLS_SERVER_NAME"]))
    if env.get("REEVE_TLS") != "1" and not env.get("REEVE_TLS_CA"):
        if env.get("REEVE_TOKEN"):
            sys.exit("REEVE_TOKEN needs TLS: set REEVE_TLS=1 or REEVE_TLS_CA")
        return grpc.insecure_channel(ADDRESS, options=options)

    def read(name):
        path = env.get(name)
        if not path:
            return None
        with open(path, "rb") as f:
            return f.read()

    creds = grpc.ssl_channel_credentials(read("REEVE_TLS_CA"), read("REEVE_TLS_KEY"), read("REEVE_TLS_CERT"))
    if env.get("REEVE_TOKEN"):
        creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(env["REEVE_TOKEN"]))
    return grpc.secure_channel(ADDRESS, creds, options=options)


def to_value(obj):
    """JSON-like Python value -> google.protobuf.Value."""
    v = struct_pb2.Value()
    json_format.ParseDict(obj, v)
    return v


def from_value(msg, field):
    """The JSON of a google.protobuf.Value field of msg; None when unset."""
    if not msg.HasField(field):
        return None
    return json_format.MessageToDict(getattr(msg, field))


def from_value_msg(v):
    """The JSON of a google.protobuf.Value message."""
    return json_format.MessageToDict(v)


def seconds(ts_or_duration):
    """A Timestamp (seconds since the epoch) or Duration as float seconds."""
    return ts_or_duration.seconds + ts_or_duration.nanos / 1e9
