"""Unit tests of the sources reference model (reference/sources.py) and of the area's notation.

The expected values are derived by hand from spec/sources.md, not read off the model.
"""

from __future__ import annotations

import pytest
from flink_semantics.conformance.examples import load_examples, notation
from flink_semantics.reference.sources import pipelined_regions, tasks_to_restart
from flink_semantics.spec.areas.sources import SourcesConfig, render_event
from flink_semantics.spec.schedule import ScheduleError

from flink_semantics import reference

N = notation("sources")


def run(config: dict, steps: str) -> list[str]:
    return [render_event(e) for e in reference.run(N.schedule(config, steps))]


def test_rendering_is_the_inverse_of_parsing() -> None:
    text = """
        @0 registered r0 [s1:2, s0:0]
        @1 assigned r1 s3
        @1 no_more_splits r0
        @2 record r0 s1 2
        @2 split_finished r0 s1
        @2 end_of_input r0
        @3 enumerator_checkpoint 4 [s2, s5]
        @3 checkpoint_failed 5
        @4 reader_checkpoint 4 r1 []
        @5 committed 4 [s0:0, s1:1]
        @5 committed - []
        @6 aborted 4
        @6 splits_back r0 [s4]
        @7 reset [0, 3]
        @8 global_failover - rescale
        @8 global_failover 4 unregistered
        @9 finished
    """
    trace = N.trace(text)
    assert [render_event(e) for e in trace] == [line.strip() for line in text.strip().splitlines()]
    for example in load_examples():  # and every trace written in spec/sources.md
        if example.area == "sources":
            assert N.trace("\n".join(map(render_event, example.trace))) == example.trace, example.id


def test_regions_are_pipelined_components_merged_on_blocking_cycles() -> None:
    # 0-1 pipelined; 2 alone; 3-4 pipelined; blocking 1>2 and 2>0 close a cycle {0,1} <-> {2}.
    assert pipelined_regions(5, [(0, 1), (3, 4)], [(1, 2), (2, 0), (4, 2)]) == [
        frozenset({0, 1, 2}), frozenset({3, 4})]
    assert pipelined_regions(3, [], []) == [frozenset({0}), frozenset({1}), frozenset({2})]


def test_restart_set_follows_consumers_and_lost_producers() -> None:
    # A chain 0 > 1 > 2 of blocking edges, plus 3 pipelined to 2.
    c = SourcesConfig(readers=1, tasks=3, pipelined=((3, 2),), blocking=((0, 1), (1, 2)))
    assert tasks_to_restart(c, 1, ()) == [1, 2, 3]  # its consumer region {2, 3}
    assert tasks_to_restart(c, 2, ()) == [2, 3]  # its inputs are kept
    assert tasks_to_restart(c, 2, (1,)) == [1, 2, 3]  # a lost input is produced again
    assert tasks_to_restart(c, 2, (0,)) == [2, 3]  # 0's result is lost, but {2, 3} does not read it ...
    assert tasks_to_restart(c, 2, (0, 1)) == [0, 1, 2, 3]  # ... while 1 does, restarted for its lost result


def test_rescale_to_two_cuts_contiguous_parts_larger_first() -> None:
    steps = """
        register r0
        request r0
        request r0
        request r0
        checkpoint 1
        barrier 1
        complete 1
        rescale 2
        register r0
        register r1
    """
    out = run({"readers": 1, "splits": [1, 1, 1]}, steps)
    assert out[-2:] == ["@8 registered r0 [s0:0, s1:0]", "@9 registered r1 [s2:0]"]


def test_a_held_assignment_is_returned_when_its_reader_fails_before_the_barrier() -> None:
    steps = """
        register r0
        checkpoint 1
        request r0
        fail 0
    """
    # The failure aborts checkpoint 1 and drops the held event; the split was tracked, so it comes back.
    assert run({"readers": 1, "splits": [2]}, steps)[-3:] == [
        "@3 reset [0]", "@3 aborted 1", "@3 splits_back r0 [s0]"]


def test_an_assignment_to_an_unregistered_reader_restores_the_last_checkpoint() -> None:
    steps = """
        register r0
        request r0
        poll r0 1
        checkpoint 1
        barrier 1
        complete 1 silent
        fail 0
        assign r0
    """
    out = run({"readers": 1, "splits": [2, 1]}, steps)
    # The reset commits what checkpoint 1 covered (SRC-29); the push then fails the job (SRC-4).
    assert out[-4:] == ["@6 reset [0]", "@6 committed 1 [s0:0]", "@6 splits_back r0 []",
                        "@7 global_failover 1 unregistered"]


def test_a_request_of_a_failed_reader_is_refused_until_it_registers() -> None:
    with pytest.raises(ScheduleError) as info:
        run({"readers": 1, "splits": [1]}, "register r0\nfail 0\nrequest r0")
    assert (info.value.step, info.value.rule) == (2, "SRC-41")


# --------------------------------------------------------------------------
# Late notifications (SRC-17, SRC-46)
# --------------------------------------------------------------------------


def test_a_late_notification_after_a_regional_restore_commits_the_other_readers_records() -> None:
    steps = """
        register r0
        register r1
        request r0
        request r1
        poll r0 1
        poll r1 1
        checkpoint 1
        barrier 1
        complete 1 silent
        fail 0
        complete 1
    """
    # The restore to 1 commits r0's records before barrier 1 (SRC-29) and returns nothing (its split
    # is under 1, SRC-22); the late notification commits r1's, which no restore touched, and r0's
    # no second time.
    assert run({"readers": 2, "splits": [2, 2]}, steps)[-4:] == [
        "@9 reset [0]", "@9 committed 1 [s0:0]", "@9 splits_back r0 []", "@10 committed 1 [s1:0]"]


def test_a_late_notification_after_a_global_restore_commits_nothing_again() -> None:
    steps = """
        register r0
        request r0
        poll r0 1
        checkpoint 1
        barrier 1
        complete 1 silent
        fail_enumerator
        register r0
        complete 1
    """
    assert run({"readers": 1, "splits": [2]}, steps)[-4:] == [
        "@6 global_failover 1 enumerator", "@6 committed 1 [s0:0]", "@7 registered r0 [s0:1]",
        "@8 committed 1 []"]


def test_a_late_notification_leaves_the_restore_point_at_the_last_completed_checkpoint() -> None:
    steps = """
        register r0
        request r0
        poll r0 1
        checkpoint 1
        barrier 1
        complete 1 silent
        poll r0 1
        checkpoint 2
        barrier 2
        complete 2 silent
        complete 1
        fail 0
        register r0
    """
    # 1's notification commits s0:0 only; the failure restores to 2 (not 1) and commits s0:1.
    assert run({"readers": 1, "splits": [3]}, steps)[-5:] == [
        "@10 committed 1 [s0:0]", "@11 reset [0]", "@11 committed 2 [s0:1]", "@11 splits_back r0 []",
        "@12 registered r0 [s0:2]"]


_COMPLETED_1 = "register r0\ncheckpoint 1\nbarrier 1\n"


@pytest.mark.parametrize(("steps", "step"), [
    (_COMPLETED_1 + "complete 1\ncomplete 1", 4),  # notified twice
    (_COMPLETED_1 + "complete 1 silent\ncomplete 1 silent", 4),  # a second completion says nothing
    (_COMPLETED_1 + "complete 1 silent\ncheckpoint 2\nbarrier 2\ncomplete 2\ncomplete 1", 7),  # after 2's
    (_COMPLETED_1 + "abort 1\ncomplete 1", 4),  # an aborted checkpoint never completes
    (_COMPLETED_1 + "checkpoint 2\nbarrier 2\ncomplete 2 silent\ncomplete 1", 6),  # subsumed by 2
], ids=["repeated", "silent again", "after a later one", "aborted", "subsumed"])
def test_impossible_notifications_are_refused(steps: str, step: int) -> None:
    with pytest.raises(ScheduleError) as info:
        run({"readers": 1, "splits": [1]}, steps)
    assert (info.value.step, info.value.rule) == (step, "SRC-46")
