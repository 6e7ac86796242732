"""The sources area's blame (conformance/areas/sources_blame.py): which rule a difference shows broken.

Each case is a schedule of spec/sources.md (most are its rules' examples), the events the reference
gives at one step and an adapter's events that break one rule there; the rule expected is worked
out from the spec's rule text, not from the hook.
"""

from __future__ import annotations

import pytest
from flink_semantics.conformance.areas import Blame
from flink_semantics.conformance.areas.sources import rules_for_events
from flink_semantics.conformance.checker import compare_scripted
from flink_semantics.reference import expected_trace
from flink_semantics.spec.areas.sources import parse_config, parse_event, parse_step
from flink_semantics.spec.schedule import Event, Schedule, Trace, schedule_from_dict


def schedule(config: str, *steps: str) -> Schedule:
    return schedule_from_dict({"area": "sources", "config": parse_config(config),
                               "steps": [parse_step(s) for s in steps]})


def events(step: int, *texts: str) -> list[Event]:
    return [parse_event(step, t) for t in texts]


def told(s: Schedule, step: int, expected: list[str], observed: list[str]) -> Blame | tuple[str, ...]:
    return rules_for_events(s, step, events(step, *expected), events(step, *observed))


# SRC-13: checkpoint 1 was taken and its barrier has not passed: the assignment must be held.
VALVE = schedule("readers=1 splits=[2]", "register r0", "checkpoint 1", "request r0")
# SRC-22's example: s0 was assigned under checkpoint 1, the restore point (completed silently).
COVERED = schedule("readers=1 splits=[1, 1]", "register r0", "request r0", "checkpoint 1", "barrier 1",
                   "complete 1 silent", "request r0", "fail 0")
# SRC-18's example: s0 is tracked under checkpoint 1, aborted.
ABORTED = schedule("readers=1 splits=[1, 1]", "register r0", "request r0", "checkpoint 1", "barrier 1",
                   "abort 1", "fail 0")
# SRC-17's third example: checkpoint 1's late notification (step 10) came after checkpoint 2 was
# taken (step 8); s1 is tracked under checkpoint 2.
LATE = schedule("readers=1 splits=[1, 1, 1]", "register r0", "request r0", "poll r0 1", "checkpoint 1",
                "barrier 1", "complete 1 silent", "request r0", "poll r0 1", "checkpoint 2", "barrier 2",
                "complete 1", "request r0", "fail 0")
# SRC-21's example: three splits under checkpoints 1, 2 and none, given back in that order.
ORDER = schedule("readers=1 splits=[1, 1, 1]", "register r0", "request r0", "checkpoint 1", "barrier 1",
                 "request r0", "checkpoint 2", "barrier 2", "request r0", "fail 0")
# SRC-20's example: record s0:0 was emitted by the attempt that failed at step 3.
DISCARDED = schedule("readers=1 splits=[2]", "register r0", "request r0", "poll r0 1", "fail 0",
                     "register r0", "request r0", "poll r0 2", "end")
# SRC-17's second example: step 10 is checkpoint 1's late notification.
LATE_COMMIT = schedule("readers=1 splits=[2]", "register r0", "request r0", "poll r0 1", "checkpoint 1",
                       "barrier 1", "complete 1 silent", "poll r0 1", "checkpoint 2", "barrier 2",
                       "complete 2 silent", "complete 1", "complete 2")
# SRC-29's example: the enumerator's failure restores checkpoint 1, which confirms it.
CONFIRMED = schedule("readers=1 splits=[2]", "register r0", "request r0", "poll r0 1", "checkpoint 1",
                     "barrier 1", "complete 1 silent", "fail_enumerator")
# SRC-24's example: s0 came back at step 3; r1 asks at step 4.
RETURNED = schedule("readers=2 splits=[1]", "register r0", "register r1", "request r0", "fail 0",
                    "request r1")
# SRC-5's example: after the enumerator's failure, r0 has not registered again at step 5.
REGISTRY = schedule("readers=1 splits=[2]", "register r0", "checkpoint 1", "barrier 1", "complete 1",
                    "fail_enumerator", "assign r0", "register r0", "assign r0")
# SRC-31's example: rescaled from 2 readers to 3, r0 gets s0 only.
RESCALED = schedule("readers=2 splits=[1, 1, 1]", "register r0", "register r1", "request r0", "request r0",
                    "request r1", "checkpoint 1", "barrier 1", "complete 1", "rescale 3", "register r0")
# SRC-25's example: r0's first attempt got NoMoreSplits, its second asks at step 4.
AGAIN = schedule("readers=1 splits=[]", "register r0", "request r0", "fail 0", "register r0", "request r0")
# The same with a split: s0 comes back at step 3, and the new attempt's request gets it.
AGAIN_WITH_SPLIT = schedule("readers=1 splits=[1]", "register r0", "request r0", "request r0", "fail 0",
                            "register r0", "request r0")
# SRC-36's example: each task its own region; task 1 feeds 2 by a blocking edge.
CHAIN = schedule("readers=1 tasks=2 blocking=[0>1, 1>2]", "register r0", "fail 1")
# SRC-35's first example: tasks 0 and 1 are one pipelined region.
REGION = schedule("readers=1 tasks=2 pipelined=[0>1] blocking=[1>2]", "register r0", "fail 2")


@pytest.mark.parametrize(("s", "step", "expected", "observed", "blame"), [
    # SRC-13: held, not delivered, while checkpoint 1 awaits its barrier.
    (VALVE, 2, [], ["assigned r0 s0"], Blame(("SRC-13",), ("SRC-8", "SRC-10"))),
    # SRC-32: END_OF_INPUT before NoMoreSplits (r0 finished s0 but was not told there is no more).
    (schedule("readers=1 splits=[1, 1]", "register r0", "request r0", "poll r0 1"), 2, [],
     ["end_of_input r0"], Blame(("SRC-32",), ("SRC-9",))),
    # SRC-5: the push to r0 after the global failover must fail the job again: the registry was not
    # restored.  SRC-4: r1 never registered.
    (REGISTRY, 5, ["global_failover 1 unregistered"], ["assigned r0 s0"], Blame(("SRC-5",), ("SRC-28",))),
    (schedule("readers=2 splits=[1]", "register r0", "assign r1"), 1, ["global_failover - unregistered"],
     ["assigned r1 s0"], Blame(("SRC-4",), ("SRC-28",))),
    # SRC-36: a union of regions, but more than the closure; SRC-35: a pipelined region cut in two.
    (CHAIN, 1, ["reset [1, 2]"], ["reset [0, 1, 2]"], Blame(("SRC-36",), ("SRC-35", "SRC-37"))),
    (REGION, 1, ["reset [2]"], ["reset [1, 2]"], Blame(("SRC-35",), ("SRC-36", "SRC-37"))),
    # SRC-22: s0 is in the restored state of checkpoint 1.
    (COVERED, 6, ["splits_back r0 [s1]"], ["splits_back r0 [s0, s1]"], Blame(("SRC-22",), ("SRC-21",))),
    # SRC-18: the abort of checkpoint 1 must not drop its bucket.
    (ABORTED, 5, ["splits_back r0 [s0]"], ["splits_back r0 []"], Blame(("SRC-18",), ("SRC-21",))),
    # SRC-17: the late notification of 1 must keep the bucket of 2.
    (LATE, 12, ["splits_back r0 [s1, s2]"], ["splits_back r0 [s2]"], Blame(("SRC-17",), ("SRC-21",))),
    # SRC-21: id order, then the uncheckpointed bucket.
    (ORDER, 8, ["splits_back r0 [s0, s1, s2]"], ["splits_back r0 [s2, s1, s0]"],
     Blame(("SRC-21",), ("SRC-7", "SRC-11"))),
    # SRC-20: the failed attempt's s0:0 is committed at the end beside the new attempt's.
    (DISCARDED, 7, ["committed - [s0:0, s0:1]"], ["committed - [s0:0, s0:0, s0:1]"],
     Blame(("SRC-20",), ("SRC-38",))),
    # SRC-17: the late notification commits what was staged before barrier 1.
    (LATE_COMMIT, 10, ["committed 1 [s0:0]"], [], Blame(("SRC-17",), ("SRC-38",))),
    # SRC-29: the restore confirms checkpoint 1.
    (CONFIRMED, 6, ["committed 1 [s0:0]"], [], Blame(("SRC-29",), ("SRC-20", "SRC-28", "SRC-38"))),
    # SRC-24: the returned split goes to whichever reader asks.
    (RETURNED, 4, ["assigned r1 s0"], ["no_more_splits r1"], Blame(("SRC-24",), ("SRC-10",))),
    # SRC-25: the new attempt may request again and get NoMoreSplits again; its request dropped
    # breaks it, also when the answer is the split that came back (not SRC-24: nothing was assigned).
    (AGAIN, 4, ["no_more_splits r0"], [], Blame(("SRC-25",), ("SRC-6", "SRC-21"))),
    (AGAIN_WITH_SPLIT, 5, ["assigned r0 s0"], [], Blame(("SRC-25",), ("SRC-6", "SRC-21"))),
    # SRC-31: contiguous parts, the larger first.
    (RESCALED, 9, ["registered r0 [s0:0]"], ["registered r0 [s1:0]"], Blame(("SRC-31",), ("SRC-2",))),
])
def test_the_difference_names_the_rule(s: Schedule, step: int, expected: list[str], observed: list[str],
                                       blame: Blame) -> None:
    assert told(s, step, expected, observed) == blame


# s1 is tracked under checkpoint 2, taken before checkpoint 1's notification (step 6) and aborted;
# s2 under checkpoint 3, aborted too but taken after that notification.
EXPOSED = ("register r0", "request r0", "checkpoint 1", "barrier 1", "request r0", "checkpoint 2",
           "complete 1", "abort 2", "request r0", "checkpoint 3", "barrier 3", "abort 3", "fail 0")


def test_a_bucket_given_back_whole_clears_the_rules_that_would_have_dropped_it() -> None:
    """s1's bucket may have been dropped by the abort of 2 (SRC-18) or by the notification of 1
    (SRC-17); s2's bucket, aborted too, came back: the abort does not drop buckets, so SRC-17.  With
    s1 back and s2 missing, SRC-18 alone explains it; without checkpoint 3, both are blamed."""
    s = schedule("readers=1 splits=[1, 1, 1]", *EXPOSED)
    assert told(s, 12, ["splits_back r0 [s1, s2]"], ["splits_back r0 [s2]"]) == Blame(
        ("SRC-17",), ("SRC-18", "SRC-21"))
    assert told(s, 12, ["splits_back r0 [s1, s2]"], ["splits_back r0 [s1]"]) == Blame(
        ("SRC-18",), ("SRC-21",))
    short = schedule("readers=1 splits=[1, 1, 1]", *EXPOSED[:8], "fail 0")
    assert told(short, 8, ["splits_back r0 [s1]"], ["splits_back r0 []"]) == Blame(
        ("SRC-17", "SRC-18"), ("SRC-21",))


def test_a_push_the_queue_cannot_tell_blames_both() -> None:
    """r1 never registered, and the enumerator's queue holds only s0, which came back at step 2: an
    adapter whose push did not fail the job skipped the registration check (SRC-4), or had lost s0
    (SRC-24); the step cannot tell which, so both are blamed."""
    s = schedule("readers=2 splits=[1]", "register r0", "request r0", "fail 0", "assign r1")
    assert told(s, 3, ["global_failover - unregistered"], []) == Blame(("SRC-4", "SRC-24"))


def test_a_difference_no_judge_knows_falls_back_to_the_kinds() -> None:
    """The enumerator's snapshot: no judge of the hook; the checker uses the event kinds' rules."""
    s = schedule("readers=1 splits=[1, 1, 1]", "register r0", "request r0", "checkpoint 1")
    assert told(s, 2, ["enumerator_checkpoint 1 [s1, s2]"], ["enumerator_checkpoint 1 [s2, s1]"]) == ()


def test_the_checker_fails_the_rule_and_leaves_the_others_possible() -> None:
    """Through the checker: SRC-22's example with s0 given back too fails SRC-22 alone."""
    want = expected_trace(COVERED)
    got = Trace(tuple(e if e.event != "splits_back" else parse_event(6, "splits_back r0 [s0, s1]")
                      for e in want.events))
    mismatch = compare_scripted(COVERED, want, got)
    assert mismatch is not None
    assert (mismatch.step, mismatch.rules, mismatch.possible) == (6, ("SRC-22",), ("SRC-21",))
