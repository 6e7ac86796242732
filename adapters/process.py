"""The process protocol, the suite's side: an adapter whose engine is a child process.

The suite starts a command and speaks JSON lines with it (docs/process-protocol.md, protocol 1):
the engine's `hello` first, then `run` -> `traces` (or `error`) batch by batch, then `close`.
`ProcessAdapter` implements spec/adapter.py's protocol over that child, so that an engine in any
language plugs in (`--adapter "process:<command line>"`, conformance/registry.py), and a Python
adapter for such an engine subclasses it and passes its command.

Everything the engine declares (name, version, capabilities, completion order, expected failures,
batch size, examples) comes from its hello: the class declares none of them before it is built
(a subclass may, as class attributes, and they then win).  Hang guards only: no behaviour depends
on how fast the engine answers, a guard only ends a wait that would never end.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flink_semantics.spec.adapter import FREE, SCRIPTED, AdapterError
from flink_semantics.spec.area import all_capabilities, areas
from flink_semantics.spec.schedule import Schedule, Trace, trace_from_dict

PROTOCOL = 1  # the version this suite speaks (docs/process-protocol.md, "Versions")
HELLO_GUARD_S = 900.0  # hang guard: the engine's hello (a JVM loading Flink on a loaded machine: a minute)
REPLY_GUARD_S = 3600.0  # hang guard: one batch's reply (the suite's --conformance-deadline comes first)
CLOSE_GUARD_S = 60.0  # hang guard: the engine's exit after close, before it is killed
STDERR_LINES = 40  # the engine's stderr lines kept for error messages
HELLO_FIELDS = {"type", "protocol", "engine", "capabilities", "completion_order", "expected_failures",
                "batch_size", "examples"}
_EOF = object()


class ProtocolError(AdapterError):
    """The engine broke the process protocol (a malformed line, a wrong id or trace count, ...)."""


# --------------------------------------------------------------------------
# The hello (docs/process-protocol.md, "hello")
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Hello:
    """An engine's declarations, from its hello line."""

    engine: str
    engine_version: str
    capabilities: Mapping[str, str | None]
    completion_order: str | Mapping[str, str]
    expected_failures: Mapping[str, str] = field(default_factory=dict)
    batch_size: int | None = None
    examples: int | None = None


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise ProtocolError(f"bad hello: {message} (docs/process-protocol.md, 'hello')")


def _order(value: Any) -> str | dict[str, str]:
    orders = (SCRIPTED, FREE)
    if isinstance(value, str):
        _need(value in orders, f"completion_order {value!r} must be 'scripted', 'free' or an object")
        return value
    _need(isinstance(value, dict), "completion_order must be 'scripted', 'free' or an object area -> order")
    for area, order in value.items():
        _need(area in areas(), f"completion_order names {area!r}, not an area (known: {', '.join(areas())})")
        _need(order in orders, f"completion_order of {area} is {order!r}: use 'scripted' or 'free'")
    return dict(value)


def _positive(hello: Mapping[str, Any], name: str) -> int | None:
    value = hello.get(name)
    _need(value is None or (type(value) is int and value > 0), f"{name} must be a positive integer")
    return value


def parse_hello(line: str) -> Hello:
    """The engine's first line as a Hello; ProtocolError naming what is wrong (its version first)."""
    try:
        hello = json.loads(line)
    except ValueError:
        raise ProtocolError(f"the engine's first line is not JSON: {line[:200]!r}") from None
    _need(isinstance(hello, dict) and hello.get("type") == "hello",
          f"the engine's first line must be a hello object, not {line[:200]!r}")
    if hello.get("protocol") != PROTOCOL:
        raise ProtocolError(f"the engine speaks protocol {hello.get('protocol')!r}; this suite speaks "
                            f"protocol {PROTOCOL} only (docs/process-protocol.md, 'Versions')")
    _need(not set(hello) - HELLO_FIELDS, f"unknown field(s) {sorted(set(hello) - HELLO_FIELDS)}")
    engine = hello.get("engine")
    _need(isinstance(engine, dict) and set(engine) == {"name", "version"}
          and all(isinstance(v, str) and v for v in engine.values()),
          "engine must be an object {\"name\": str, \"version\": str}, both non-empty")
    caps = hello.get("capabilities")
    _need(isinstance(caps, dict), "capabilities must be an object capability -> null or reason")
    known = set(all_capabilities())
    for cap, reason in caps.items():
        _need(cap in known, f"capability {cap!r} is not one of the suite's (CAPABILITIES of spec/areas/)")
        _need(reason is None or (isinstance(reason, str) and reason.strip() != ""),
              f"capability {cap!r}: null (supported) or a non-empty reason")
    failures = hello.get("expected_failures", {})
    _need(isinstance(failures, dict) and all(isinstance(r, str) for r in failures.values()),
          "expected_failures must be an object rule ID -> reason")
    _need("completion_order" in hello, "completion_order is missing")
    return Hello(engine["name"], engine["version"], dict(caps), _order(hello["completion_order"]),
                 dict(failures), _positive(hello, "batch_size"), _positive(hello, "examples"))


# --------------------------------------------------------------------------
# The child process
# --------------------------------------------------------------------------


class _Child:
    """The engine's process: JSON lines on stdin and stdout, the tail of its stderr kept."""

    def __init__(self, command: Sequence[str], cwd: str | None, env: Mapping[str, str] | None):
        try:
            self.proc = subprocess.Popen(
                list(command), cwd=cwd, env=None if env is None else dict(env), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8", errors="replace",
                start_new_session=True)  # its own process group: a hang guard ends the engine's children too
        except OSError as e:
            raise AdapterError(f"cannot start the engine {list(command)!r}: {e.strerror or e}") from None
        self.lines: queue.Queue[Any] = queue.Queue()
        self.stderr: deque[str] = deque(maxlen=STDERR_LINES)
        threading.Thread(target=self._pump_stdout, daemon=True, name="process-adapter-stdout").start()
        self.err_thread = threading.Thread(target=self._pump_stderr, daemon=True,
                                           name="process-adapter-stderr")
        self.err_thread.start()

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(_EOF)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))

    def send(self, message: Mapping[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(message, separators=(",", ":")) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # the engine is gone: receive() reports how it ended

    def receive(self, guard_s: float) -> str | None:
        """The next stdout line, or None at end of output; AdapterError after the hang guard."""
        try:
            line = self.lines.get(timeout=guard_s)
        except queue.Empty:
            raise AdapterError(f"within the hang guard of {guard_s:g} s") from None
        return None if line is _EOF else str(line).rstrip("\r\n")

    def tail(self) -> list[str]:
        """The last lines of stderr: all of them once the engine has exited, else those read so far."""
        if self.proc.poll() is not None:
            self.err_thread.join(timeout=CLOSE_GUARD_S)  # hang guard: a child of the engine holding stderr
        return list(self.stderr)

    def end(self, guard_s: float) -> int | None:
        """Close stdin and wait for the exit; kill the process group after the hang guard."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass
        try:
            return self.proc.wait(timeout=guard_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()


# --------------------------------------------------------------------------
# The adapter
# --------------------------------------------------------------------------


class _FromHello:
    """A member the engine declares in its hello: None on the class (the suite reads nothing before
    the adapter is built), the hello's value on an adapter (starting the engine when needed)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.field = name

    def __get__(self, adapter: ProcessAdapter | None, owner: type | None = None) -> Any:
        if adapter is None:
            return None
        return adapter._member(self.field)


class ProcessAdapter:
    """An adapter (spec/adapter.py) whose engine is a child process speaking docs/process-protocol.md.

    `command` is the engine's command line (argv, not a shell string), `cwd` its working directory,
    `env` its whole environment (None: the suite's).  `prepare()` starts it and reads its hello;
    every member the hello declares starts it too when read first.  Guards (seconds) only end waits
    that would never end: `hello_guard_s` for the hello, `reply_guard_s` for one batch's reply,
    `close_guard_s` for the exit after `close` (then the engine's process group is killed).
    """

    name = _FromHello()
    version = _FromHello()
    completion_order = _FromHello()
    expected_failures = _FromHello()
    batch_size = _FromHello()
    examples = _FromHello()

    def __init__(self, command: Sequence[str], cwd: str | None = None, env: Mapping[str, str] | None = None,
                 *, hello_guard_s: float = HELLO_GUARD_S, reply_guard_s: float = REPLY_GUARD_S,
                 close_guard_s: float = CLOSE_GUARD_S):
        if isinstance(command, str) or not command or not all(isinstance(a, str) and a for a in command):
            raise ValueError("command: a non-empty sequence of non-empty strings (an argv, not a shell line)")
        for guard, value in (("hello_guard_s", hello_guard_s), ("reply_guard_s", reply_guard_s),
                             ("close_guard_s", close_guard_s)):
            if not value > 0:
                raise ValueError(f"{guard}: a hang guard must be > 0 seconds, got {value!r}")
        self.command = list(command)
        self.cwd, self.env = cwd, env
        self.guards = (hello_guard_s, reply_guard_s, close_guard_s)
        self.hello: Hello | None = None
        self._child: _Child | None = None
        self._lock = threading.Lock()  # one request at a time on the pipe
        self._next_id = 1
        self._batches = self._schedules = 0
        self._startup = 0.0
        self._exit: int | None = None
        self._closed = False

    # -- the handshake ------------------------------------------------------

    def prepare(self) -> None:
        """Start the engine and read its hello (once); AdapterError if it does not say hello."""
        with self._lock:
            if self.hello is not None:
                return
            if self._closed:
                raise AdapterError(f"{self._who()}: closed")
            started = time.monotonic()
            self._child = _Child(self.command, self.cwd, self.env)
            try:
                self.hello = self._read_hello()
            except AdapterError:
                self._child.end(self.guards[2])
                self._closed = True
                raise
            self._startup = time.monotonic() - started

    def _read_hello(self) -> Hello:
        line = self._receive(self.guards[0], "its hello")
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        assert self._child is not None
        if isinstance(message, dict) and message.get("type") == "error":  # it could not start
            self._child.end(self.guards[2])
            raise AdapterError(f"{self._who()} could not start: {message.get('message')}{self._tail_text()}")
        try:
            return parse_hello(line)
        except ProtocolError as e:
            self._child.end(self.guards[2])
            raise ProtocolError(f"{self._who()}: {e}{self._tail_text()}") from None

    def _member(self, name: str) -> Any:
        if self.hello is None:
            self.prepare()
        assert self.hello is not None
        if name == "name":
            return self.hello.engine
        if name == "version":
            return f"{self.hello.engine} {self.hello.engine_version}"
        return getattr(self.hello, name)

    def capabilities(self) -> Mapping[str, str | None]:
        """The capabilities of the engine's hello (a capability it does not name: not declared)."""
        return dict(self._member("capabilities"))

    # -- batches --------------------------------------------------------------

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        """One `run` message with the schedules, one trace each from the engine's `traces` reply.

        An `error` reply, a malformed one or an engine that exits raises AdapterError with the
        engine's message and the tail of its stderr."""
        self.prepare()
        with self._lock:
            if self._closed:
                raise AdapterError(f"{self._who()}: closed")
            request, self._next_id = self._next_id, self._next_id + 1
            assert self._child is not None
            self._child.send({"type": "run", "id": request, "schedules": [s.to_dict() for s in schedules]})
            reply = self._reply(request)
            traces = self._traces(reply, request, schedules)
            self._batches += 1
            self._schedules += len(schedules)
            return traces

    def _reply(self, request: int) -> dict[str, Any]:
        line = self._receive(self.guards[1], f"its reply to run {request}")
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        shapes = {"traces": {"type", "id", "traces"}, "error": {"type", "id", "message"}}
        if not (isinstance(reply, dict) and set(reply) == shapes.get(str(reply.get("type")))):
            raise self._broken(f"answered run {request} with a line that is not a traces or error "
                               f"message: {line[:200]!r}")
        if reply["type"] == "error" and reply["id"] in (request, None):  # None: it could not read the run
            self._closed = reply["id"] is None  # an engine that cannot read the suite's lines is done
            if self._closed:
                self._child.end(self.guards[2])  # type: ignore[union-attr]
            raise AdapterError(f"{self._who()} could not run batch {request}: {reply['message']}"
                               f"{self._tail_text()}")
        if reply["id"] != request:
            raise self._broken(f"answered run {request} with the id {reply['id']!r}")
        return reply

    def _traces(self, reply: Mapping[str, Any], request: int, schedules: Sequence[Schedule]) -> list[Trace]:
        raw = reply.get("traces")
        if not isinstance(raw, list) or len(raw) != len(schedules):
            got = f"{len(raw)} traces" if isinstance(raw, list) else f"traces {type(raw).__name__}"
            raise self._broken(f"answered run {request} of {len(schedules)} schedule(s) with {got}: "
                               "one trace per schedule, in order")
        traces = []
        for i, (schedule, trace) in enumerate(zip(schedules, raw)):
            try:
                if not (isinstance(trace, dict) and set(trace) == {"events"}
                        and isinstance(trace["events"], list)):
                    raise ValueError('a trace is an object {"events": [...]}')
                traces.append(trace_from_dict(trace, schedule.area))
            except (ValueError, TypeError, KeyError, AttributeError) as e:
                raise self._broken(f"answered run {request} with trace {i}, not a {schedule.area} trace: "
                                   f"{e}") from None
        return traces

    # -- errors ---------------------------------------------------------------

    def _receive(self, guard_s: float, what: str) -> str:
        assert self._child is not None
        try:
            line = self._child.receive(guard_s)
        except AdapterError as e:
            self._closed = True
            self._child.kill()
            raise AdapterError(f"{self._who()} hung: {what} did not come {e}; killed"
                               f"{self._tail_text()}") from None
        if line is None:
            self._closed = True
            self._exit = self._child.end(self.guards[2])
            status = "has not exited" if self._exit is None else f"exited with status {self._exit}"
            raise AdapterError(f"{self._who()} closed its output and {status} before {what}"
                               f"{self._tail_text()}")
        return line

    def _broken(self, what: str) -> ProtocolError:
        """The engine broke the protocol: it is stopped (nothing it says next can be trusted)."""
        self._closed = True
        assert self._child is not None
        self._child.end(self.guards[2])
        return ProtocolError(f"{self._who()} {what} (docs/process-protocol.md){self._tail_text()}")

    def _who(self) -> str:
        engine = self.hello.engine if self.hello is not None else os.path.basename(self.command[0])
        return f"engine {engine!r}"

    def _tail_text(self) -> str:
        """The stderr tail: its last line on the message's first line, the rest below it."""
        tail = self._child.tail() if self._child is not None else []
        tail = [line for line in tail if line.strip()]
        if not tail:
            return "; its stderr is empty"
        return f"; its stderr ends: {tail[-1].strip()}\n" + "\n".join(f"  stderr: {t}" for t in tail)

    # -- the end ----------------------------------------------------------------

    def close(self) -> None:
        """Send `close` and wait for the engine to exit (its process group killed after the guard)."""
        acquired = self._lock.acquire(timeout=self.guards[2])  # a hung batch holds it: close anyway
        try:
            if self._child is None or self._child.proc.returncode is not None:
                self._closed = True
                return
            if not self._closed:
                self._child.send({"type": "close"})
            self._closed = True
            self._exit = self._child.end(self.guards[2])
        finally:
            if acquired:
                self._lock.release()

    def summary(self) -> list[str]:
        """One line: the engine, its protocol, the batches it ran, how long its start took."""
        if self.hello is None:
            return [f"process protocol {PROTOCOL}: the engine {self.command[0]!r} never said hello"]
        ended = ("" if self._exit is None and not self._closed
                 else "; it was killed" if self._exit is None else f"; it exited with status {self._exit}")
        return [f"process protocol {PROTOCOL}: engine {self.hello.engine} {self.hello.engine_version} "
                f"(`{' '.join(self.command)}`): {self._batches} batches, {self._schedules} schedules; "
                f"hello after {self._startup:.1f} s{ended}"]
