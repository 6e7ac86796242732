"""A test engine speaking the process protocol (docs/process-protocol.md), standalone:

    python tests/process_engine.py serve NAME [--examples N]    a built-in adapter (or module:factory)
                                                               served behind the protocol
    python tests/process_engine.py misbehave HOW               an engine breaking the protocol in
                                                               one way (MISBEHAVIOURS)

`serve` is the package's server (adapters/process_server.py) on an adapter named as `--adapter`
names it; `misbehave` serves the reference model too, except where HOW says.  Every misbehaving
engine exits at the end of its standard input.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from flink_semantics.adapters.process import ProcessAdapter
from flink_semantics.adapters.process_server import hello_of, protocol_stdout, serve
from flink_semantics.adapters.reference import ReferenceAdapter
from flink_semantics.spec.schedule import schedule_from_dict

# HOW -> what the engine does wrong
MISBEHAVIOURS = {
    "exit-at-start": "writes to stderr and exits with status 3 before its hello",
    "not-json": "its first line is not JSON",
    "not-hello": "its first line is a JSON object that is not a hello",
    "protocol-2": "its hello speaks protocol 2",
    "bad-capability": "its hello declares a capability the suite does not know",
    "bad-expected-failure": "its hello lists an expected failure of a rule not in spec/",
    "start-error": "answers with an error instead of its hello (it cannot start)",
    "wrong-id": "answers a run with another id",
    "wrong-count": "answers a run with one trace fewer",
    "bad-trace": "answers a run with an event its area does not have",
    "error": "answers every run with an error message",
    "exit-in-run": "exits with status 5 when it gets a run",
    "noise": "writes a line that is not a protocol message before its reply",
    "hang-hello": "never says hello",
    "hang-close": "ignores close and the end of its input",
}


class SmallReference(ReferenceAdapter):
    """The reference on a small budget (`serve reference --examples 5` declares the same in its hello)."""

    examples = 5


class PrintingReference(ReferenceAdapter):
    """The reference writing to standard output, itself and through a child process, as adapters do."""

    def prepare(self) -> None:
        print("PrintingReference: starting")

    def run_batch(self, schedules: Any) -> Any:
        print("PrintingReference: a batch")
        subprocess.run([sys.executable, "-c", "print('a child process writing to fd 1')"], check=True)
        return super().run_batch(schedules)


class ServedReference(ProcessAdapter):
    """A Python adapter for an engine behind the protocol, as an engine's package writes one: the
    command given by the subclass, a member the hello has no field for as a class attribute."""

    shrink = False

    def __init__(self) -> None:
        here = os.path.dirname(os.path.abspath(__file__))
        super().__init__([sys.executable, os.path.join(here, "process_engine.py"), "serve", "reference",
                          "--examples", "7"])


def hello() -> dict[str, Any]:
    return hello_of(SmallReference())


def write(out: Any, message: Any) -> None:
    out.write((message if isinstance(message, str) else json.dumps(message)) + "\n")
    out.flush()


def reply(how: str, message: dict[str, Any]) -> Any:
    """The answer to a run, wrong as HOW says."""
    schedules = [schedule_from_dict(s, validate=False) for s in message["schedules"]]
    traces = [t.to_dict() for t in ReferenceAdapter().run_batch(schedules)]
    request = message["id"]
    if how == "wrong-id":
        return {"type": "traces", "id": request + 1, "traces": traces}
    if how == "wrong-count":
        return {"type": "traces", "id": request, "traces": traces[:-1]}
    if how == "bad-trace":
        bad = {"events": [{"step": 0, "event": "no_such_event"}]}
        return {"type": "traces", "id": request, "traces": [bad for _ in traces]}
    if how == "error":
        print("the engine's own log line", file=sys.stderr, flush=True)
        return {"type": "error", "id": request, "message": "the batch could not run: no slots left"}
    return {"type": "traces", "id": request, "traces": traces}


def opening(how: str) -> Any:
    """The first line, wrong as HOW says (None: exit or hang before it)."""
    if how == "exit-at-start":
        print("engine: cannot find its configuration", file=sys.stderr, flush=True)
        sys.exit(3)
    if how == "hang-hello":
        time.sleep(3600)
    wrong: dict[str, Any] = {
        "not-json": "hello, suite",
        "not-hello": {"type": "traces", "id": 0, "traces": []},
        "protocol-2": {**hello(), "protocol": 2},
        "bad-capability": {**hello(), "capabilities": {"key_groups": None, "key_groups.teleport": None}},
        "bad-expected-failure": {**hello(), "expected_failures": {"KG-999": "no such rule"}},
        "start-error": {"type": "error", "id": None, "message": "no Java runtime found"},
    }
    return wrong.get(how, hello())


def misbehave(how: str) -> int:
    if how not in MISBEHAVIOURS:
        print(f"unknown misbehaviour {how!r}: one of {', '.join(MISBEHAVIOURS)}", file=sys.stderr)
        return 2
    out = protocol_stdout()
    write(out, opening(how))
    for line in sys.stdin:
        message = json.loads(line)
        if message["type"] == "close" and how != "hang-close":
            return 0
        if message["type"] != "run":
            continue
        if how == "exit-in-run":
            print("engine: out of memory", file=sys.stderr, flush=True)
            return 5
        if how == "noise":
            write(out, "INFO engine: running a batch")
        write(out, reply(how, message))
    if how == "hang-close":
        time.sleep(3600)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "serve":
        from flink_semantics.conformance.registry import load_adapter

        examples = int(argv[3]) if argv[2:3] == ["--examples"] else None
        out = protocol_stdout()
        return serve(load_adapter(argv[1]), sys.stdin, out, examples=examples)
    if len(argv) == 2 and argv[0] == "misbehave":
        return misbehave(argv[1])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
