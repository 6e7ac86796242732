"""Flink's side of the `pyflink` adapter: prerequisites, and environments on a local mini-cluster.

PyFlink starts one JVM per process (its py4j gateway, on loopback); each job runs on a local
mini-cluster inside it, and its Python functions run in that JVM's embedded interpreter
(`python.execution-mode: thread`), which costs less per subtask than a Python process of its own.
Missing apache-flink or Java raise AdapterError with a one-line message before a JVM is started.
Everything the mini-cluster starts binds to 127.0.0.1.
"""

from __future__ import annotations

import sys
from typing import Any

from flink_semantics.adapters import check_java
from flink_semantics.spec.adapter import AdapterError

# Everything Flink starts listens on loopback only; no web UI is on the classpath.
_CONF = {
    "python.execution-mode": "thread",
    "rest.bind-address": "127.0.0.1",
    "rest.address": "127.0.0.1",
    "jobmanager.bind-host": "127.0.0.1",
    "taskmanager.bind-host": "127.0.0.1",
    "taskmanager.host": "127.0.0.1",
    # A job of many Python subtasks starts an interpreter for each on two cores: the task manager
    # may not answer heartbeats for a minute (the default timeout is 50 s).
    "heartbeat.timeout": "600000",
}


def check_prerequisites() -> None:
    """Raise AdapterError (one line) when apache-flink or Java is missing."""
    try:
        import pyflink  # noqa: F401
    except ImportError:
        raise AdapterError("pyflink adapter: apache-flink is not installed "
                           "(the pyflink extra: pip install 'flink-semantics[pyflink]', or '.[pyflink]' in a "
                           "clone, or tox -e conformance-pyflink)") from None
    check_java("pyflink")


def configuration(**extra: str) -> Any:
    """A Flink Configuration: loopback, embedded Python running this interpreter, plus `extra`."""
    from pyflink.common import Configuration

    conf = Configuration()
    for key, value in {**_CONF, "python.executable": sys.executable, **extra}.items():
        conf.set_string(key, value)
    return conf


def stream_environment(**extra: str) -> Any:
    """A new StreamExecutionEnvironment on the local mini-cluster (one job per `execute`)."""
    from pyflink.datastream import StreamExecutionEnvironment

    return StreamExecutionEnvironment.get_execution_environment(configuration(**extra))


def jvm() -> Any:
    """Flink's JVM (PyFlink's py4j gateway), to call Flink's own Java functions."""
    from pyflink.java_gateway import get_gateway

    return get_gateway().jvm


def task_info(ctx: Any) -> tuple[int, int, int]:
    """(index, parallelism, maximum parallelism) of the subtask a Python function runs in, from
    Flink's task info (see `subtask_index`)."""
    info = ctx._runtime_context.getTaskInfo()
    return (int(info.getIndexOfThisSubtask()), int(info.getNumberOfParallelSubtasks()),
            int(info.getMaxNumberOfParallelSubtasks()))


def subtask_index(ctx: Any) -> int:
    """The index of the subtask a Python function runs in.

    PyFlink 2.3.0's `get_index_of_this_subtask()` fails in thread mode (it calls
    `RuntimeContext.getIndexOfThisSubtask()`, which Flink 2.0 moved to `getTaskInfo()`); the task
    info gives the same number."""
    try:
        return int(ctx.get_index_of_this_subtask())
    except AttributeError:
        return int(ctx._runtime_context.getTaskInfo().getIndexOfThisSubtask())
