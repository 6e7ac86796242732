"""The process protocol, the engine's side: any Python adapter served behind it.

    python -m flink_semantics.adapters.process_server MODULE:FACTORY [--examples N] [--batch-size N]

builds the adapter (`FACTORY()`), starts it (`prepare()`), writes its hello and then answers each
`run` with its `run_batch` until `close` or the end of standard input (docs/process-protocol.md).
The suite's own engines are served so in CI (tests/test_process_protocol.py), and an engine author
can read it as a worked example of the protocol.  Standard output carries only protocol lines:
whatever the adapter (or a JVM it starts) writes there goes to standard error.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback
from collections.abc import Mapping
from typing import Any, TextIO

from flink_semantics.spec.adapter import AdapterError
from flink_semantics.spec.schedule import Trace, schedule_from_dict

PROTOCOL = 1  # docs/process-protocol.md, "Versions" (the suite's side: adapters/process.py)


def expected_failures_of(adapter: Any) -> dict[str, str]:
    """The adapter's `expected_failures` as a mapping (a path is read relative to its module)."""
    value = getattr(adapter, "expected_failures", None)
    if value is None:
        return {}
    if isinstance(value, str):
        module = sys.modules.get(type(adapter).__module__)
        base = os.path.dirname(getattr(module, "__file__", "") or ".")
        with open(os.path.join(base, value), encoding="utf-8") as f:
            value = json.load(f)
    return {str(rule): str(reason) for rule, reason in dict(value).items()}


def hello_of(adapter: Any, examples: int | None = None, batch_size: int | None = None) -> dict[str, Any]:
    """The hello message declaring the adapter (its own budget hints unless given)."""
    order = adapter.completion_order
    hello: dict[str, Any] = {
        "type": "hello", "protocol": PROTOCOL,
        "engine": {"name": str(adapter.name),
                   "version": str(getattr(adapter, "version", None) or "unversioned")},
        "capabilities": dict(adapter.capabilities()),
        "completion_order": dict(order) if isinstance(order, Mapping) else str(order),
        "expected_failures": expected_failures_of(adapter),
    }
    for name, given in (("batch_size", batch_size), ("examples", examples)):
        value = given if given is not None else getattr(adapter, name, None)
        if isinstance(value, int) and value > 0:
            hello[name] = value
    return hello


def answer(adapter: Any, message: Mapping[str, Any]) -> dict[str, Any]:
    """The reply to one `run` message: its traces, or an error naming why the batch could not run."""
    request = message.get("id")
    try:
        schedules = [schedule_from_dict(s, validate=False) for s in message["schedules"]]
        traces = adapter.run_batch(schedules)
        if not all(isinstance(t, Trace) for t in traces):
            raise AdapterError("run_batch returned something that is not a list of Traces")
        return {"type": "traces", "id": request, "traces": [t.to_dict() for t in traces]}
    except AdapterError as e:
        return {"type": "error", "id": request, "message": str(e)}
    except Exception as e:  # a bug of the adapter: its traceback on stderr, one line to the suite
        traceback.print_exc(file=sys.stderr)
        first = (str(e).strip().splitlines() or [""])[0]
        return {"type": "error", "id": request, "message": f"run_batch raised {type(e).__name__}: {first}"}


def serve(adapter: Any, stdin: TextIO, stdout: TextIO, examples: int | None = None,
          batch_size: int | None = None) -> int:
    """Serve the adapter until `close` or end of input: 0, or 1 after a line it cannot read."""

    def write(message: Mapping[str, Any]) -> None:
        stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
        stdout.flush()

    try:
        if hasattr(adapter, "prepare"):
            adapter.prepare()
        write(hello_of(adapter, examples, batch_size))
    except Exception as e:  # it cannot start: an error instead of the hello
        traceback.print_exc(file=sys.stderr)
        write({"type": "error", "id": None, "message": f"{type(e).__name__}: {e}"})
        return 1
    try:
        for line in stdin:
            try:
                message = json.loads(line)
                kind = message["type"]
            except (ValueError, TypeError, KeyError):
                write({"type": "error", "id": None, "message": f"not a protocol message: {line[:200]!r}"})
                return 1
            if kind == "close":
                break
            if kind != "run":
                write({"type": "error", "id": message.get("id"), "message": f"unknown message type {kind!r}"})
                return 1
            write(answer(adapter, message))
        return 0
    finally:
        adapter.close()


def protocol_stdout() -> TextIO:
    """Standard output kept for protocol lines; file descriptor 1 then goes to standard error, so
    that nothing else (a print, a JVM's log) can write there."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flink_semantics.adapters.process_server",
                                     description="Serve a Python adapter behind the process protocol.")
    parser.add_argument("factory", metavar="MODULE:FACTORY", help="the adapter's factory")
    parser.add_argument("--examples", type=int, help="examples per property to declare in the hello")
    parser.add_argument("--batch-size", type=int, help="schedules per batch to declare in the hello")
    args = parser.parse_args(argv)
    module, _, attr = args.factory.partition(":")
    if not module or not attr:
        parser.error("MODULE:FACTORY: give the factory as module:attribute")
    out = protocol_stdout()
    try:
        adapter = getattr(importlib.import_module(module), attr)()
    except Exception as e:  # no adapter to serve: an error instead of the hello
        traceback.print_exc(file=sys.stderr)
        out.write(json.dumps({"type": "error", "id": None, "message": f"cannot build {args.factory}: "
                              f"{type(e).__name__}: {e}"}) + "\n")
        out.flush()
        return 1
    return serve(adapter, sys.stdin, out, args.examples, args.batch_size)


if __name__ == "__main__":
    sys.exit(main())
