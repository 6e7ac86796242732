"""Hand-derived async I/O cases that both the reference model and the PySpark adapter are checked on.

Each case is name -> (configuration, steps, expected trace), written in the notation of
spec/async-io.md ("Notation used in the examples"), one step or event a line; most are the rules'
own examples.  The expected traces are derived by hand from the rules, never from the code under
test.  tests/test_reference_async_io.py runs them through `flink_semantics.reference.run`,
tests/test_pyspark_async_io.py in one `run_batch` of the PySpark adapter; cases only one of them
checks stay in that module.
"""

from __future__ import annotations

from typing import Any

from flink_semantics.conformance.checker import compare_scripted
from flink_semantics.conformance.examples import notation
from flink_semantics.spec.schedule import Schedule, Trace

# The notation of spec/async-io.md, one item a line.
ASYNC_IO = notation("async_io")
parse_schedule, parse_step, parse_trace, render_event = (
    ASYNC_IO.schedule, ASYNC_IO.step, ASYNC_IO.trace, ASYNC_IO.render)


def fixed(max_attempts: int, delay: int, **predicates: bool) -> dict[str, Any]:
    """A fixed-delay retry strategy (AIO-33); predicates: if_empty=True, if_error=True."""
    return {"strategy": "fixed_delay", "max_attempts": max_attempts, "delay": delay, **predicates}


def assert_trace(name: str, schedule: Schedule, observed: Trace, expected: str) -> None:
    """The observed trace is the expected one, up to the freedom of spec/schedules.md item 7
    (compared by the suite's own checker)."""
    want = parse_trace(expected)
    problem = compare_scripted(schedule, want, observed)
    assert problem is None, (f"{name}: {problem.what}\nexpected:\n  " + "\n  ".join(map(render_event, want))
                             + "\nobserved:\n  " + "\n  ".join(map(render_event, observed)))


CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    # AIO-12 (the rule's example): ordered mode emits in input order, watermarks included.
    "ordered": ({"capacity": 3}, """
        record 1
        watermark 5
        record 2
        complete r1 [20]
        complete r0 [10]
    """, """
        @0 invoke r0 #1
        @2 invoke r1 #1
        @4 emit r0 10 ts=-
        @4 watermark 5
        @4 emit r1 20 ts=-
    """),
    # AIO-14 (the rule's example): unordered, completion order inside a segment, segments in order.
    "unordered": ({"mode": "unordered"}, """
        record 1
        watermark 5
        record 2
        record 3
        complete r2 [30]
        complete r1 [20]
        complete r0 [10]
    """, """
        @0 invoke r0 #1
        @2 invoke r1 #1
        @3 invoke r2 #1
        @6 emit r0 10 ts=-
        @6 watermark 5
        @6 emit r2 30 ts=-
        @6 emit r1 20 ts=-
    """),
    # AIO-7 (the rule's example): a full queue blocks the channel, in order.
    "capacity": ({"capacity": 1}, """
        record 1
        record 2
        watermark 9
        record 3
        complete r0 [10]
        complete r1 [20]
    """, """
        @0 invoke r0 #1
        @4 emit r0 10 ts=-
        @4 invoke r1 #1
        @5 emit r1 20 ts=-
        @5 watermark 9
        @5 invoke r2 #1
    """),
    # AIO-59 (the rule's example): the timeout starts at admission, not arrival.
    "timeout-complete": ({"capacity": 1, "timeout": 50, "on_timeout": "complete", "timeout_result": [0]}, """
        record 1
        record 2
        advance 30
        complete r0 [10]
        advance 49
        advance 1
    """, """
        @0 invoke r0 #1
        @3 emit r0 10 ts=-
        @3 invoke r1 #1
        @5 timeout r1
        @5 emit r1 0 ts=-
    """),
    # AIO-34 (the rule's example): max_attempts counts retries; then the error fails the task.
    "retry-error": ({"timeout": 1000, "retry": fixed(2, 10, if_error=True)}, """
        record 1
        error r0
        advance 10
        error r0
        advance 10
        error r0
    """, """
        @0 invoke r0 #1
        @2 invoke r0 #2
        @4 invoke r0 #3
        @5 fail r0 error
    """),
    # AIO-40 (the rule's example): exponential backoff 10, 20, min(40, 35).
    "retry-exponential": ({"timeout": 1000, "retry": {
        "strategy": "exponential_backoff", "max_attempts": 4, "initial_delay": 10, "max_delay": 35,
        "multiplier": 2.0, "if_error": True}}, """
        record 1
        error r0
        advance 10
        error r0
        advance 20
        error r0
        advance 34
        advance 1
    """, """
        @0 invoke r0 #1
        @2 invoke r0 #2
        @4 invoke r0 #3
        @7 invoke r0 #4
    """),
    # AIO-46 (the rule's example): restore replays the snapshot with fresh timeouts.
    "crash-restore": ({"timeout": 50}, """
        record 1
        watermark 5
        record 2
        checkpoint 1
        complete r0 [10]
        advance 30
        crash
        restore 1
        complete r0 [11]
        advance 50
    """, """
        @0 invoke r0 #1
        @2 invoke r1 #1
        @3 checkpoint 1 [r0, w5, r1]
        @4 emit r0 10 ts=-
        @4 watermark 5
        @7 invoke r0 #1
        @7 invoke r1 #1
        @8 emit r0 11 ts=-
        @8 watermark 5
        @9 timeout r1
        @9 fail r1 timeout
    """),
    # AIO-25 (the rule's example): after a failure, restoring the checkpoint reprocesses the record.
    "fail-restore": ({}, """
        record 1
        checkpoint 1
        error r0
        restore 1
        complete r0 [10]
    """, """
        @0 invoke r0 #1
        @1 checkpoint 1 [r0]
        @2 fail r0 error
        @3 invoke r0 #1
        @4 emit r0 10 ts=-
    """),
    # AIO-47 (the rule's example): a smaller restored capacity blocks, loses nothing.
    "restore-smaller": ({"capacity": 3}, """
        record 1
        record 2
        record 3
        checkpoint 1
        crash
        restore 1 capacity=1
        complete r0 [10]
        complete r1 [20]
    """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @2 invoke r2 #1
        @3 checkpoint 1 [r0, r1, r2]
        @5 invoke r0 #1
        @6 emit r0 10 ts=-
        @6 invoke r1 #1
        @7 emit r1 20 ts=-
        @7 invoke r2 #1
    """),
    # AIO-51 (the rule's example): statuses bypass the queue but wait in the channel.
    "status": ({"capacity": 1}, """
        record 1
        status idle
        record 2
        status active
        checkpoint 1
        complete r0 [10]
    """, """
        @0 invoke r0 #1
        @1 status idle
        @5 emit r0 10 ts=-
        @5 invoke r1 #1
        @5 status active
        @5 checkpoint 1 [r1]
    """),
}
