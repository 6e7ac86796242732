"""The rule an async I/O difference shows broken (conformance/areas/async_io_blame.py, issue 32 item 1).

Each case is a schedule, the spec's trace (written by hand from the rules of spec/async-io.md, most
of them the rules' own examples) and a hand-made wrong trace, in the notation of spec/async-io.md.
The checker compares them and the area's hook blames: the rule the difference breaks by the spec's
text (`rules`), and the rules that could explain it too but are not singled out (`possible`).
"""

from __future__ import annotations

from typing import Any

import pytest
from flink_semantics.conformance.areas import Blame
from flink_semantics.conformance.areas.async_io import rules_for_events
from flink_semantics.conformance.checker import compare
from flink_semantics.spec.adapter import SCRIPTED

from flink_semantics import reference
from tests.async_io_cases import fixed, parse_schedule, parse_trace

# name -> (config, steps, the spec's trace, a wrong trace, broken rules, possible rules)
CASES: dict[str, tuple[dict[str, Any], str, str, str, tuple[str, ...], tuple[str, ...]]] = {
    # A record arrives at a full queue and is called: AIO-7 (a call before admission, AIO-9, looks the same).
    "full queue admits its head": ({"capacity": 1}, """
        record 7
        record 8
        """, """
        @0 invoke r0 #1
        """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        """, ("AIO-7",), ("AIO-9",)),
    # The watermark holds a slot (AIO-6's example): an adapter that does not count it looks the same.
    "full queue with a watermark admits its head": ({"capacity": 2}, """
        record 7
        watermark 5
        record 8
        """, """
        @0 invoke r0 #1
        """, """
        @0 invoke r0 #1
        @2 invoke r1 #1
        """, ("AIO-7",), ("AIO-9", "AIO-6")),
    # r2 waited; r1 completes behind the incomplete head with a value: its slot is freed but its
    # value not emitted, AIO-8.
    "a completion frees the slot of a record not emitted": ({"capacity": 2}, """
        record 7
        record 8
        record 9
        complete r1 [80]
        """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @3 invoke r2 #1
        """, ("AIO-8",), ("AIO-9",)),
    # The same with an empty result: emitted out of order (nothing shows), AIO-12; or freed without
    # emission, AIO-8.
    "an empty result leaves an ordered queue early": ({"capacity": 2}, """
        record 7
        record 8
        record 9
        complete r1 []
        """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @3 invoke r2 #1
        """, ("AIO-12",), ("AIO-9", "AIO-8")),
    "an unordered empty result crosses a watermark's slot": ({"mode": "unordered", "capacity": 3}, """
        record 7
        watermark 5
        record 8
        record 9
        complete r1 []
        """, """
        @0 invoke r0 #1
        @2 invoke r1 #1
        """, """
        @0 invoke r0 #1
        @2 invoke r1 #1
        @4 invoke r2 #1
        """, ("AIO-13",), ("AIO-9", "AIO-6", "AIO-8")),
    # AIO-6's example: r1 is admitted when r0 and the watermark leave; an adapter that keeps a slot
    # after emission (or gives the status one) leaves r1 waiting.
    "a freed slot is not used": ({"capacity": 2}, """
        record 7
        watermark 5
        record 8
        complete r0 [70]
        """, """
        @0 invoke r0 #1
        @3 emit r0 70 ts=-
        @3 watermark 5
        @3 invoke r1 #1
        """, """
        @0 invoke r0 #1
        @3 emit r0 70 ts=-
        @3 watermark 5
        """, ("AIO-6",), ("AIO-7",)),
    # AIO-12's example, r1 emitted at its completion.
    "ordered mode emits a record before the head": ({"capacity": 3}, """
        record 7
        watermark 5
        record 8
        complete r1 [80]
        complete r0 [70]
        """, """
        @0 invoke r0 #1
        @2 invoke r1 #1
        @4 emit r0 70 ts=-
        @4 watermark 5
        @4 emit r1 80 ts=-
        """, """
        @0 invoke r0 #1
        @2 invoke r1 #1
        @3 emit r1 80 ts=-
        @4 emit r0 70 ts=-
        @4 watermark 5
        """, ("AIO-12",), ("AIO-15",)),
    # AIO-13's example, r1 emitted at its completion across the watermark.
    "unordered mode emits a record across a watermark": ({"mode": "unordered", "capacity": 4}, """
        record 7
        watermark 5
        record 8
        complete r1 [80]
        complete r0 [70]
        """, """
        @0 invoke r0 #1
        @2 invoke r1 #1
        @4 emit r0 70 ts=-
        @4 watermark 5
        @4 emit r1 80 ts=-
        """, """
        @0 invoke r0 #1
        @2 invoke r1 #1
        @3 emit r1 80 ts=-
        @4 emit r0 70 ts=-
        @4 watermark 5
        """, ("AIO-13",), ("AIO-15",)),
    # AIO-14's first example, r1 and r2 in admission order instead of completion order.
    "unordered mode emits a segment in admission order": ({"mode": "unordered"}, """
        record 7
        watermark 5
        record 8
        record 9
        complete r2 [90]
        complete r1 [80]
        complete r0 [70]
        """, """
        @0 invoke r0 #1
        @2 invoke r1 #1
        @3 invoke r2 #1
        @6 emit r0 70 ts=-
        @6 watermark 5
        @6 emit r2 90 ts=-
        @6 emit r1 80 ts=-
        """, """
        @0 invoke r0 #1
        @2 invoke r1 #1
        @3 invoke r2 #1
        @6 emit r0 70 ts=-
        @6 watermark 5
        @6 emit r1 80 ts=-
        @6 emit r2 90 ts=-
        """, ("AIO-14",), ()),
    # AIO-17's example in unordered mode with the two watermarks swapped.
    "two watermarks swapped": ({"mode": "unordered"}, """
        record 7
        watermark 2
        watermark 5
        complete r0 []
        """, """
        @0 invoke r0 #1
        @3 watermark 2
        @3 watermark 5
        """, """
        @0 invoke r0 #1
        @3 watermark 5
        @3 watermark 2
        """, ("AIO-17",), ("AIO-13",)),
    # AIO-16's example, the watermark held until something else happens.
    "a watermark with nothing before it is held": ({}, """
        record 7
        complete r0 [70]
        watermark 5
        """, """
        @0 invoke r0 #1
        @1 emit r0 70 ts=-
        @2 watermark 5
        """, """
        @0 invoke r0 #1
        @1 emit r0 70 ts=-
        """, ("AIO-16",), ()),
    # AIO-18's example with the values of r0 in another order, then with another timestamp.
    "a result's values in another order": ({"mode": "unordered"}, """
        record 7 @100
        complete r0 [70, 71]
        """, """
        @0 invoke r0 #1
        @1 emit r0 70 ts=100
        @1 emit r0 71 ts=100
        """, """
        @0 invoke r0 #1
        @1 emit r0 71 ts=100
        @1 emit r0 70 ts=100
        """, ("AIO-18",), ()),
    "a result without the input's timestamp": ({}, """
        record 7 @100
        complete r0 [70]
        """, """
        @0 invoke r0 #1
        @1 emit r0 70 ts=100
        """, """
        @0 invoke r0 #1
        @1 emit r0 70 ts=-
        """, ("AIO-18",), ()),
    # AIO-45's first example: the same elements in another order, then one missing.
    "a snapshot in another order": ({"capacity": 3}, """
        record 7
        record 8
        watermark 5
        complete r1 [80]
        checkpoint 1
        """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @4 checkpoint 1 [r0, r1, w5]
        """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @4 checkpoint 1 [r1, r0, w5]
        """, ("AIO-45",), ()),
    "a snapshot without a completed record": ({"capacity": 3}, """
        record 7
        record 8
        watermark 5
        complete r1 [80]
        checkpoint 1
        """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @4 checkpoint 1 [r0, r1, w5]
        """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @4 checkpoint 1 [r0, w5]
        """, ("AIO-44",), ()),
    # The same with an empty result: r1 may have left the queue before r0 (an emission with no output
    # shows no event), AIO-12; or freed its slot without emission (AIO-8), or the snapshot left it out
    # (AIO-44).  OrderedAsUnordered's counterexample of test_checkpoint_and_restore, shortened.
    "a snapshot without a completed record of no result": ({"capacity": 3}, """
        record 7
        record 8
        complete r1 []
        checkpoint 1
        """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @3 checkpoint 1 [r0, r1]
        """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @3 checkpoint 1 [r0]
        """, ("AIO-12",), ("AIO-8", "AIO-44")),
    # Unordered: r1 completes behind the watermark, which waits for r0: it left its segment early, AIO-13.
    "unordered snapshot without a completed record of no result": ({"mode": "unordered", "capacity": 4}, """
        record 7
        watermark 5
        record 8
        complete r1 []
        checkpoint 1
        """, """
        @0 invoke r0 #1
        @2 invoke r1 #1
        @4 checkpoint 1 [r0, w5, r1]
        """, """
        @0 invoke r0 #1
        @2 invoke r1 #1
        @4 checkpoint 1 [r0, w5]
        """, ("AIO-13",), ("AIO-8", "AIO-44")),
    # A watermark admitted to a full queue shows no event; the barrier behind it then passes it.
    "a barrier passes a blocked watermark": ({"capacity": 1}, """
        record 7
        watermark 5
        checkpoint 1
        """, """
        @0 invoke r0 #1
        """, """
        @0 invoke r0 #1
        @2 checkpoint 1 [r0, w5]
        """, ("AIO-7",), ("AIO-6", "AIO-9")),
    # r1 waits at the full queue from 0 and is admitted at 5 (AIO-59's example, shorter): its deadline
    # is 15, not 10.
    "a timeout from arrival": ({"capacity": 1, "timeout": 10, "on_timeout": "ignore"}, """
        record 7
        record 8
        advance 5
        complete r0 [70]
        advance 5
        """, """
        @0 invoke r0 #1
        @3 emit r0 70 ts=-
        @3 invoke r1 #1
        """, """
        @0 invoke r0 #1
        @3 emit r0 70 ts=-
        @3 invoke r1 #1
        @4 timeout r1
        """, ("AIO-59",), ("AIO-2",)),
    # AIO-27's example, the handler called again.
    "a second timeout": ({"timeout": 50, "on_timeout": "ignore"}, """
        record 7
        advance 50
        advance 100
        """, """
        @0 invoke r0 #1
        @1 timeout r0
        """, """
        @0 invoke r0 #1
        @1 timeout r0
        @2 timeout r0
        """, ("AIO-27",), ()),
    "a timeout after completion": ({"timeout": 10}, """
        record 7
        complete r0 [70]
        advance 10
        """, """
        @0 invoke r0 #1
        @1 emit r0 70 ts=-
        """, """
        @0 invoke r0 #1
        @1 emit r0 70 ts=-
        @2 timeout r0
        @2 fail r0 timeout
        """, ("AIO-31",), ("AIO-32",)),
    # AIO-2's example, the deadline passed by.
    "a missed timeout": ({"timeout": 50}, """
        record 7
        advance 49
        advance 1
        """, """
        @0 invoke r0 #1
        @2 timeout r0
        @2 fail r0 timeout
        """, """
        @0 invoke r0 #1
        """, ("AIO-27",), ("AIO-2",)),
    # AIO-51's example with the first status held in the queue behind r0.
    "a status queued": ({"capacity": 1}, """
        record 7
        status idle
        """, """
        @0 invoke r0 #1
        @1 status idle
        """, """
        @0 invoke r0 #1
        """, ("AIO-51",), ()),
    # AIO-47's example with the restored r1 not replayed.
    "a restore skips a stored record": ({"capacity": 3}, """
        record 7
        record 8
        checkpoint 1
        crash
        restore 1
        """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @2 checkpoint 1 [r0, r1]
        @4 invoke r0 #1
        @4 invoke r1 #1
        """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @2 checkpoint 1 [r0, r1]
        @4 invoke r0 #1
        """, ("AIO-46",), ("AIO-47", "AIO-57")),
    # Ordered mode run as unordered: r1's empty result leaves at once, so r2 is called at its arrival
    # at a queue the spec holds full.  A larger bound would call it too, but would hold r3's 5 behind
    # r2 as the spec does; the adapter's later events (r3 emitted first) are unordered mode's: AIO-12.
    "a slot freed out of order, shown by the later events": ({"capacity": 2, "mode": "ordered"}, """
        record 7
        record 8
        complete r1 []
        record 9
        complete r0 []
        record 10
        complete r3 [5]
        complete r2 [4]
        """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @4 invoke r2 #1
        @5 invoke r3 #1
        @7 emit r2 4 ts=-
        @7 emit r3 5 ts=-
        """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @3 invoke r2 #1
        @5 invoke r3 #1
        @6 emit r3 5 ts=-
        @7 emit r2 4 ts=-
        """, ("AIO-12",), ("AIO-9", "AIO-8")),
    # AIO-44's example with the barrier taken past the blocked r1 (a Spark micro-batch commits once its
    # queue drained): nothing the spec keeps waiting is in the snapshot, so the barrier overtook it.
    "a checkpoint taken past a blocked record": ({"capacity": 1}, """
        record 7
        record 8
        checkpoint 1
        """, """
        @0 invoke r0 #1
        """, """
        @0 invoke r0 #1
        @2 checkpoint 1 []
        """, ("AIO-44",), ("AIO-7",)),
    # D5 (Flink 2.3.0): the timeout at exactly the deadline is an outcome Flink still retries (its
    # check is now - admission > timeout), so the task does not fail; the spec fails it: AIO-33.
    "an outcome at its deadline retried": ({"capacity": 1, "timeout": 1,
                                            "retry": fixed(1, 3, if_error=True)}, """
        record 7
        advance 1
        """, """
        @0 invoke r0 #1
        @1 timeout r0
        @1 fail r0 timeout
        """, """
        @0 invoke r0 #1
        @1 timeout r0
        """, ("AIO-33",), ()),
    # D5 and D3 together (a schedule Flink 2.3.0's engine ran): r2's empty result at its deadline (2) is
    # retried by Flink (D5), its second call comes when the retry's timer fires at 4, and end of input
    # calls it once more (D3, which the D5 model does not do): the first difference is D5's, AIO-33.
    "an outcome at its deadline retried, then called again at the end": (
        {"mode": "ordered", "capacity": 3, "timeout": 2, "on_timeout": "ignore",
         "retry": fixed(1, 2, if_empty=True)}, """
        record 0
        record 0
        record 0
        advance 2
        complete r2 []
        complete r1 [0]
        complete r0 [0]
        record 0
        advance 2
        end
        """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @2 invoke r2 #1
        @3 timeout r0
        @3 timeout r1
        @3 timeout r2
        @6 emit r0 0 ts=-
        @6 emit r1 0 ts=-
        @7 invoke r3 #1
        @8 timeout r3
        """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @2 invoke r2 #1
        @3 timeout r0
        @3 timeout r1
        @3 timeout r2
        @6 emit r0 0 ts=-
        @6 emit r1 0 ts=-
        @7 invoke r3 #1
        @8 invoke r2 #2
        @8 timeout r3
        @9 invoke r2 #3
        """, ("AIO-33",), ()),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_difference_blames_its_rule(name: str) -> None:
    config, steps, spec, wrong, broken, possible = CASES[name]
    schedule = parse_schedule(config, steps)
    expected = parse_trace(spec)
    assert compare(schedule, expected, reference.run(schedule), SCRIPTED) is None, "the spec's trace is wrong"
    mismatch = compare(schedule, expected, parse_trace(wrong), SCRIPTED)
    assert mismatch is not None
    assert (mismatch.rules, mismatch.possible) == (broken, possible), mismatch.what


def test_the_hook_blames_on_the_events_of_one_step() -> None:
    """Called directly with one step's events: the extra call of r1 at a full queue."""
    schedule = parse_schedule({"capacity": 1}, "record 7\nrecord 8\n")
    (extra,) = parse_trace("@1 invoke r1 #1").events
    assert rules_for_events(schedule, 1, [], [extra]) == Blame(("AIO-7",), ("AIO-9",))


def test_what_it_cannot_read_falls_back_to_the_kinds_rules() -> None:
    """A fail event that differs is no reading of this module: the kinds' rules (empty tuple)."""
    schedule = parse_schedule({}, "record 7\nerror r0\n")
    (fail,) = parse_trace("@1 fail r0 error").events
    assert rules_for_events(schedule, 1, [fail], []) == ()
