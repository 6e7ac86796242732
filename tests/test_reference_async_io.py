"""Unit tests of the reference model of async I/O (reference/async_io.py).

Every expected trace here was derived by hand from the rules of spec/async-io.md,
in the notation of that file (see "Notation used in the examples"); many are the
rules' own examples.  Inside one step the spec orders output events and side
effects separately and leaves their interleaving open (spec/schedules.md item 7);
every other event keeps its place.  Traces are compared so by the suite's checker
(conformance/checker.py); conformance/examples.py parses and renders the notation.
"""

from __future__ import annotations

from typing import Any

import pytest
from flink_semantics.adapters.reference import ReferenceAdapter
from flink_semantics.conformance.examples import load_examples
from flink_semantics.reference.async_io import AsyncIoModel, backoff
from flink_semantics.spec.areas.async_io import RetryConfig
from flink_semantics.spec.schedule import ScheduleError, schedule_from_dict

from flink_semantics import reference
from tests.async_io_cases import (
    CASES,
    assert_trace,
    fixed,
    parse_schedule,
    parse_step,
    parse_trace,
    render_event,
)


def check(config: dict[str, Any], steps: str, trace: str) -> None:
    schedule = parse_schedule(config, steps)
    assert_trace("reference", schedule, reference.run(schedule), trace)


# --------------------------------------------------------------------------
# The cases the PySpark adapter is checked on too (tests/async_io_cases.py)
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_shared_case(name: str) -> None:
    config, steps, trace = CASES[name]
    schedule = parse_schedule(config, steps)
    assert_trace(name, schedule, reference.run(schedule), trace)


def test_rendering_is_the_inverse_of_parsing() -> None:
    """render_event writes what parse_trace reads, for every event kind of the notation."""
    text = """
        @-1 rejected
        @0 invoke r0 #1
        @1 timeout r0
        @1 emit r0 0 ts=7
        @2 emit r1 5 ts=-
        @2 watermark -3
        @3 status idle
        @3 status active
        @4 checkpoint 1 [r0, w5, r2]
        @4 checkpoint 2 []
        @5 fail r0 error
        @5 fail - timeout
        @6 finished
    """
    trace = parse_trace(text)
    assert [render_event(e) for e in trace] == [line.strip() for line in text.strip().splitlines()]
    assert parse_trace("\n".join(map(render_event, trace))) == trace
    for example in load_examples():  # and every trace written in spec/async-io.md
        if example.area != "async_io":
            continue
        assert parse_trace("\n".join(map(render_event, example.trace))) == example.trace, example.id


# --------------------------------------------------------------------------
# Ordering (AIO-12..AIO-18)
# --------------------------------------------------------------------------


def test_unordered_segments_aio_13() -> None:
    # The shared AIO-12 case in unordered mode gives the same trace: the watermark keeps r1 behind r0.
    _, steps, trace = CASES["ordered"]
    check({"mode": "unordered", "capacity": 4}, steps, trace)


def test_unordered_without_watermarks_is_completion_order_aio_14() -> None:
    check({"mode": "unordered"}, """
        record 1
        record 2
        record 3
        complete r2 [30]
        complete r0 [10]
        complete r1 [20]
    """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @2 invoke r2 #1
        @3 emit r2 30 ts=-
        @4 emit r0 10 ts=-
        @5 emit r1 20 ts=-
    """)


def test_watermark_waits_for_earlier_record_aio_15() -> None:
    check({"mode": "unordered"}, """
        record 1
        watermark 5
        complete r0 [10]
    """, """
        @0 invoke r0 #1
        @2 emit r0 10 ts=-
        @2 watermark 5
    """)


def test_watermark_on_empty_queue_is_emitted_at_once_aio_16() -> None:
    for mode in ("ordered", "unordered"):
        check({"mode": mode}, """
            watermark 3
            record 1
            complete r0 [10]
            watermark 5
        """, """
            @0 watermark 3
            @1 invoke r0 #1
            @2 emit r0 10 ts=-
            @3 watermark 5
        """)


def test_consecutive_watermarks_are_all_emitted_aio_17() -> None:
    for mode in ("ordered", "unordered"):
        check({"mode": mode}, """
            record 1
            watermark 2
            watermark 5
            complete r0 []
            watermark 7
            watermark 9
        """, """
            @0 invoke r0 #1
            @3 watermark 2
            @3 watermark 5
            @4 watermark 7
            @5 watermark 9
        """)


def test_result_is_one_run_with_the_input_timestamp_aio_18() -> None:
    check({"mode": "unordered"}, """
        record 7 @100
        record 8
        complete r1 [80, 81]
        complete r0 [70, 71]
    """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @2 emit r1 80 ts=-
        @2 emit r1 81 ts=-
        @3 emit r0 70 ts=100
        @3 emit r0 71 ts=100
    """)


# --------------------------------------------------------------------------
# Capacity (AIO-5..AIO-9, AIO-44)
# --------------------------------------------------------------------------


def test_watermarks_take_slots_aio_6() -> None:
    check({"capacity": 2}, """
        record 1
        watermark 5
        record 2
        complete r0 [10]
    """, """
        @0 invoke r0 #1
        @3 emit r0 10 ts=-
        @3 watermark 5
        @3 invoke r1 #1
    """)


def test_completed_but_unemitted_record_keeps_its_slot_aio_8() -> None:
    check({"capacity": 2}, """
        record 1
        record 2
        complete r1 [20]
        record 3
        complete r0 [10]
    """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @4 emit r0 10 ts=-
        @4 emit r1 20 ts=-
        @4 invoke r2 #1
    """)


def test_default_capacity_is_100_aio_5() -> None:
    steps = "\n".join(f"record {i}" for i in range(101)) + "\ncomplete r0 []"
    trace = "\n".join(f"@{i} invoke r{i} #1" for i in range(100)) + "\n@101 invoke r100 #1"
    check({}, steps, trace)


def test_checkpoint_barrier_waits_behind_a_blocked_record_aio_44() -> None:
    check({"capacity": 1}, """
        record 1
        record 2
        checkpoint 1
        complete r0 [10]
    """, """
        @0 invoke r0 #1
        @3 emit r0 10 ts=-
        @3 invoke r1 #1
        @3 checkpoint 1 [r1]
    """)


def test_model_observations_while_blocked() -> None:
    model = AsyncIoModel(parse_schedule({"capacity": 1, "timeout": 50}, "").config)
    s = parse_schedule({"capacity": 1, "timeout": 50}, "record 1\nrecord 2\ncheckpoint 1\nadvance 20")
    for i, step in enumerate(s.steps):
        model.apply(i, step)
    assert model.queue_size() == 1
    assert model.waiting_inputs() == 2  # r1 and the barrier
    assert model.outstanding() == [0]
    assert model.admitted() == [0]
    assert model.pending_timers() == [50]
    assert model.now == 20
    assert model.taken_checkpoints == set()


# --------------------------------------------------------------------------
# Results and failures (AIO-19..AIO-25)
# --------------------------------------------------------------------------


def test_empty_result_frees_the_slot_without_output_aio_19() -> None:
    check({"capacity": 1}, """
        record 1
        record 2
        complete r0 []
    """, """
        @0 invoke r0 #1
        @2 invoke r1 #1
    """)


def test_null_result_fails_the_task_aio_20() -> None:
    check({}, """
        record 1
        complete r0 null
    """, """
        @0 invoke r0 #1
        @1 fail r0 null_result
    """)


def test_null_result_with_retry_is_refused_at_the_call_aio_20() -> None:
    check({"timeout": 50, "retry": fixed(1, 10, if_error=True)}, """
        record 1
        complete r0 null
        complete r0 [5]
    """, """
        @0 invoke r0 #1
        @2 emit r0 5 ts=-
    """)


def test_only_the_first_completion_counts_aio_21() -> None:
    check({}, """
        record 1
        complete r0 [1]
        complete r0 [2]
        error r0
    """, """
        @0 invoke r0 #1
        @1 emit r0 1 ts=-
    """)


def test_error_fails_the_task_and_ends_the_incarnation_aio_23_aio_58() -> None:
    check({"mode": "unordered"}, """
        record 1
        record 2
        error r0
    """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @2 fail r0 error
    """)


# --------------------------------------------------------------------------
# Timeouts (AIO-2, AIO-26..AIO-32, AIO-53, AIO-54, AIO-59)
# --------------------------------------------------------------------------


def test_default_handler_fails_at_the_deadline_aio_2_aio_28() -> None:
    check({"timeout": 50}, """
        record 1
        advance 49
        advance 1
    """, """
        @0 invoke r0 #1
        @2 timeout r0
        @2 fail r0 timeout
    """)


def test_no_timeout_when_timeout_is_zero_aio_2() -> None:
    check({}, """
        record 1
        advance 1000000
    """, "@0 invoke r0 #1")


def test_completing_handler_gives_the_result_aio_29() -> None:
    check({"timeout": 50, "on_timeout": "complete", "timeout_result": [0]}, """
        record 1 @7
        advance 50
        complete r0 [9]
    """, """
        @0 invoke r0 #1
        @1 timeout r0
        @1 emit r0 0 ts=7
    """)


def test_ignoring_handler_keeps_the_call_outstanding_aio_27_aio_30() -> None:
    check({"timeout": 50, "on_timeout": "ignore"}, """
        record 1
        advance 50
        advance 500
        complete r0 [9]
    """, """
        @0 invoke r0 #1
        @1 timeout r0
        @3 emit r0 9 ts=-
    """)


def test_no_timeout_after_completion_aio_31_aio_32() -> None:
    s = parse_schedule({"timeout": 50}, """
        record 1
        advance 49
        complete r0 [9]
        advance 1
    """)
    model = reference.model_for(s)
    events = [render_event(e) for i, st in enumerate(s.steps) for e in model.apply(i, st)]
    assert events == ["@0 invoke r0 #1", "@2 emit r0 9 ts=-"]
    assert model.pending_timers() == []


def test_watermarks_do_not_move_timers_aio_53() -> None:
    check({"timeout": 50}, """
        record 1
        watermark 1000000
    """, "@0 invoke r0 #1")


def test_equal_deadlines_fire_in_registration_order_aio_54() -> None:
    check({"mode": "unordered", "timeout": 50, "on_timeout": "complete", "timeout_result": [0]}, """
        record 1
        record 2
        advance 50
    """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @2 timeout r0
        @2 emit r0 0 ts=-
        @2 timeout r1
        @2 emit r1 0 ts=-
    """)


def test_timer_registered_while_firing_fires_in_the_same_step_aio_54() -> None:
    check({"capacity": 1, "timeout": 50, "on_timeout": "complete", "timeout_result": [0]}, """
        record 1
        record 2
        advance 200
    """, """
        @0 invoke r0 #1
        @2 timeout r0
        @2 emit r0 0 ts=-
        @2 invoke r1 #1
        @2 timeout r1
        @2 emit r1 0 ts=-
    """)


# --------------------------------------------------------------------------
# Retries (AIO-4, AIO-26, AIO-33..AIO-41, AIO-60)
# --------------------------------------------------------------------------


def test_strategy_without_predicate_does_not_retry_aio_4() -> None:
    check({"timeout": 100, "retry": fixed(2, 10)}, """
        record 1
        complete r0 []
        advance 10
        end
    """, """
        @0 invoke r0 #1
        @3 finished
    """)


def test_retry_on_empty_result_aio_33() -> None:
    check({"timeout": 100, "retry": fixed(3, 10, if_empty=True)}, """
        record 1
        complete r0 []
        advance 9
        advance 1
        complete r0 [5]
    """, """
        @0 invoke r0 #1
        @3 invoke r0 #2
        @4 emit r0 5 ts=-
    """)


def test_error_is_not_retried_without_if_error_aio_33() -> None:
    check({"timeout": 100, "retry": fixed(3, 10, if_empty=True)}, """
        record 1
        error r0
    """, """
        @0 invoke r0 #1
        @1 fail r0 error
    """)


def test_outcome_at_the_deadline_is_final_aio_33() -> None:
    check({"timeout": 100, "on_timeout": "ignore", "retry": fixed(3, 10, if_empty=True)}, """
        record 1
        advance 100
        complete r0 []
        end
    """, """
        @0 invoke r0 #1
        @1 timeout r0
        @3 finished
    """)


def test_retry_cutoff_counts_from_admission_aio_33_aio_59() -> None:
    check({"capacity": 1, "timeout": 50, "on_timeout": "ignore", "retry": fixed(3, 5, if_empty=True)}, """
        record 1
        record 2
        advance 30
        complete r0 [1]
        advance 20
        complete r1 []
        advance 5
    """, """
        @0 invoke r0 #1
        @3 emit r0 1 ts=-
        @3 invoke r1 #1
        @6 invoke r1 #2
    """)


def test_zero_max_attempts_never_retries_aio_34() -> None:
    check({"timeout": 1000, "retry": fixed(0, 10, if_error=True)}, """
        record 1
        error r0
    """, """
        @0 invoke r0 #1
        @1 fail r0 error
    """)


def test_retried_record_keeps_its_place_aio_35() -> None:
    check({"capacity": 2, "timeout": 100, "retry": fixed(1, 10, if_empty=True)}, """
        record 1
        record 2
        complete r0 []
        complete r1 [20]
        advance 10
        complete r0 [10]
    """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @4 invoke r0 #2
        @5 emit r0 10 ts=-
        @5 emit r1 20 ts=-
    """)


def test_exhausted_retries_apply_the_last_outcome_aio_36() -> None:
    check({"timeout": 100, "retry": fixed(1, 10, if_empty=True)}, """
        record 1
        complete r0 []
        advance 10
        complete r0 []
        end
    """, """
        @0 invoke r0 #1
        @2 invoke r0 #2
        @4 finished
    """)


def test_timeout_covers_all_attempts_aio_26() -> None:
    check({"timeout": 100, "retry": fixed(5, 30, if_empty=True)}, """
        record 1
        complete r0 []
        advance 30
        complete r0 []
        advance 30
        complete r0 []
        advance 30
        advance 10
    """, """
        @0 invoke r0 #1
        @2 invoke r0 #2
        @4 invoke r0 #3
        @6 invoke r0 #4
        @7 timeout r0
        @7 fail r0 timeout
    """)


def test_timeout_cancels_a_pending_retry_aio_37() -> None:
    check({"timeout": 50, "retry": fixed(3, 40, if_empty=True)}, """
        record 1
        advance 20
        complete r0 []
        advance 40
    """, """
        @0 invoke r0 #1
        @3 timeout r0
        @3 fail r0 timeout
    """)


def test_timeout_with_completing_handler_during_backoff_aio_37() -> None:
    cfg = {"timeout": 50, "on_timeout": "complete", "timeout_result": [0],
           "retry": fixed(3, 40, if_empty=True)}
    check(cfg, """
        record 1
        advance 20
        complete r0 []
        advance 40
        end
    """, """
        @0 invoke r0 #1
        @3 timeout r0
        @3 emit r0 0 ts=-
        @4 finished
    """)


def test_ignored_timeout_during_backoff_stalls_until_end_of_input_aio_37_aio_39() -> None:
    s = parse_schedule({"timeout": 50, "on_timeout": "ignore", "retry": fixed(3, 40, if_empty=True)}, """
        record 1
        advance 20
        complete r0 []
        advance 40
        advance 100
        complete r0 [7]
        end
        complete r0 []
    """)
    model = reference.model_for(s)
    events: list[str] = []
    for i, step in enumerate(s.steps):
        events += [render_event(e) for e in model.apply(i, step)]
        if i == 4:  # stalled: admitted, but no call and no timer
            assert model.outstanding() == [] and model.admitted() == [0] and model.pending_timers() == []
    assert events == ["@0 invoke r0 #1", "@3 timeout r0", "@6 invoke r0 #2", "@7 finished"]


def test_repeated_completion_while_waiting_for_retry_is_ignored_aio_38() -> None:
    check({"timeout": 100, "retry": fixed(2, 10, if_empty=True)}, """
        record 1
        complete r0 []
        complete r0 [5]
        advance 10
        complete r0 [6]
    """, """
        @0 invoke r0 #1
        @3 invoke r0 #2
        @4 emit r0 6 ts=-
    """)


def test_end_of_input_fires_pending_retries_once_in_admission_order_aio_39() -> None:
    check({"capacity": 3, "timeout": 1000, "retry": fixed(3, 100, if_empty=True)}, """
        record 1
        record 2
        complete r1 []
        complete r0 []
        end
        complete r0 []
        complete r1 [20]
        advance 1000
    """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @4 invoke r0 #2
        @4 invoke r1 #2
        @6 emit r1 20 ts=-
        @6 finished
    """)


def test_end_of_input_does_not_call_records_with_a_call_aio_60() -> None:
    check({"timeout": 1000, "retry": fixed(3, 10, if_empty=True)}, """
        record 1
        complete r0 []
        advance 10
        end
        complete r0 [5]
    """, """
        @0 invoke r0 #1
        @2 invoke r0 #2
        @4 emit r0 5 ts=-
        @4 finished
    """)


def test_backoff_formula_aio_40() -> None:
    exp = RetryConfig(strategy="exponential_backoff", initial_delay=10, max_delay=100, multiplier=3.0)
    assert [backoff(exp, n) for n in (1, 2, 3, 4, 5)] == [10, 30, 90, 100, 100]
    small_cap = RetryConfig(strategy="exponential_backoff", initial_delay=10, max_delay=5, multiplier=2.0)
    assert [backoff(small_cap, n) for n in (1, 2)] == [10, 5]  # the first retry is not capped
    fractional = RetryConfig(strategy="exponential_backoff", initial_delay=3, max_delay=1000, multiplier=1.5)
    assert [backoff(fractional, n) for n in (2, 3)] == [4, 6]  # 4.5 and 6.75 truncated
    assert backoff(RetryConfig(strategy="exponential_backoff", initial_delay=1, max_delay=7), 10_000) == 7
    assert backoff(RetryConfig(strategy="fixed_delay", delay=25), 9) == 25


def test_zero_delay_retry_fires_in_the_same_step_aio_54() -> None:
    check({"timeout": 10, "retry": fixed(1, 0, if_empty=True)}, """
        record 1
        complete r0 []
    """, """
        @0 invoke r0 #1
        @1 invoke r0 #2
    """)


def test_attempts_are_not_checkpointed_aio_41() -> None:
    check({"timeout": 1000, "retry": fixed(3, 10, if_empty=True)}, """
        record 1
        complete r0 []
        advance 10
        checkpoint 1
        crash
        restore 1
        complete r0 [5]
    """, """
        @0 invoke r0 #1
        @2 invoke r0 #2
        @3 checkpoint 1 [r0]
        @5 invoke r0 #1
        @6 emit r0 5 ts=-
    """)


# --------------------------------------------------------------------------
# End of input, checkpoints, restore (AIO-42, AIO-44..AIO-48, AIO-55..AIO-57)
# --------------------------------------------------------------------------


def test_end_of_input_waits_for_the_queue_aio_42_aio_56() -> None:
    check({}, """
        record 1
        watermark 5
        end
        complete r0 []
    """, """
        @0 invoke r0 #1
        @3 watermark 5
        @3 finished
    """)
    check({}, "end", "@0 finished")


def test_snapshot_holds_completed_unemitted_records_and_watermarks_aio_45() -> None:
    check({"capacity": 3}, """
        record 1
        record 2
        watermark 5
        complete r1 [20]
        checkpoint 1
    """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @4 checkpoint 1 [r0, r1, w5]
    """)


def test_unordered_snapshot_order_aio_45_aio_55() -> None:
    check({"mode": "unordered"}, """
        record 1
        watermark 5
        record 2
        record 3
        record 4
        complete r3 [40]
        complete r1 [20]
        checkpoint 1
    """, """
        @0 invoke r0 #1
        @2 invoke r1 #1
        @3 invoke r2 #1
        @4 invoke r3 #1
        @7 checkpoint 1 [r0, w5, r3, r1, r2]
    """)


def test_unordered_incomplete_records_in_admission_order_aio_55() -> None:
    check({"mode": "unordered"}, """
        record 1
        record 2
        record 3
        checkpoint 1
        watermark 5
        record 4
        record 5
        record 6
        complete r4 [50]
        checkpoint 2
    """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @2 invoke r2 #1
        @3 checkpoint 1 [r0, r1, r2]
        @5 invoke r3 #1
        @6 invoke r4 #1
        @7 invoke r5 #1
        @9 checkpoint 2 [r0, r1, r2, w5, r4, r3, r5]
    """)


def test_outputs_before_the_checkpoint_are_not_repeated_aio_48() -> None:
    check({}, """
        record 1
        record 2
        complete r0 [10]
        checkpoint 1
        complete r1 [20]
        crash
        restore 1
        complete r1 [21]
    """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @2 emit r0 10 ts=-
        @3 checkpoint 1 [r1]
        @4 emit r1 20 ts=-
        @6 invoke r1 #1
        @7 emit r1 21 ts=-
    """)


def test_restored_capacity_aio_57() -> None:
    check({}, """
        record 1
        checkpoint 1
        crash
        restore 1 capacity=1
        record 2
        complete r0 []
    """, """
        @0 invoke r0 #1
        @1 checkpoint 1 [r0]
        @3 invoke r0 #1
        @5 invoke r1 #1
    """)


def test_restore_from_nothing_starts_empty_and_new_input_follows() -> None:
    check({"capacity": 1}, """
        record 1
        record 2
        crash
        restore none
        record 3
        complete r2 [30]
    """, """
        @0 invoke r0 #1
        @4 invoke r2 #1
        @5 emit r2 30 ts=-
    """)


# --------------------------------------------------------------------------
# Watermark statuses (AIO-51)
# --------------------------------------------------------------------------


# --------------------------------------------------------------------------
# Configuration and malformed schedules
# --------------------------------------------------------------------------


@pytest.mark.parametrize("config, rule", [
    ({"capacity": 0}, "AIO-1"),
    ({"retry": fixed(1, 10, if_error=True)}, "AIO-3"),
])
def test_refused_configuration_gives_a_rejected_trace_aio_1_aio_3(config: dict[str, Any], rule: str) -> None:
    s = schedule_from_dict({"area": "async_io", "config": config, "steps": []}, validate=False)
    with pytest.raises(ScheduleError) as err:
        reference.run(s)
    assert err.value.rule == rule and err.value.step is None
    [trace] = ReferenceAdapter().run_batch([s])
    assert [(e.step, e.event) for e in trace] == [(-1, "rejected")]
    assert rule in str(err.value) and trace.events[0].reason


def test_adapter_runs_a_batch_in_order_and_supports_everything() -> None:
    adapter = ReferenceAdapter()
    a = parse_schedule({}, "record 1\ncomplete r0 [1]")
    b = parse_schedule({}, "watermark 4")
    assert [[render_event(e) for e in t] for t in adapter.run_batch([a, b])] == [
        ["@0 invoke r0 #1", "@1 emit r0 1 ts=-"], ["@0 watermark 4"]]
    assert all(reason is None for reason in adapter.capabilities().values())


def _error(config: dict[str, Any], steps: str) -> ScheduleError:
    s = parse_schedule(config, steps, validate=False)
    with pytest.raises(ScheduleError) as err:
        reference.run(s)
    return err.value


@pytest.mark.parametrize("config, steps, step, rule", [
    ({"capacity": 1}, "record 1\nrecord 2\ncomplete r1 [5]", 2, "SCH-4"),  # r1 waits in the channel
    ({}, "record 1\ncrash\nrestore none\ncomplete r0 [1]", 3, "SCH-4"),  # r0 was not restored
    ({"capacity": 1}, "record 1\nrecord 2\ncheckpoint 1\ncrash\nrestore 1", 4, "SCH-5"),  # not taken
    ({}, "record 1\nerror r0\nrecord 2", 2, "SCH-7"),  # only a restore follows a failure
    ({}, "record 1\nrestore none", 1, "SCH-7"),  # restore while alive
    ({}, "end\nrestore none", 1, "SCH-7"),  # a finished task is still alive
])
def test_dynamic_schedule_errors_name_step_and_rule(config: dict[str, Any], steps: str, step: int,
                                                    rule: str) -> None:
    err = _error(config, steps)
    assert (err.step, err.rule) == (step, rule)
    assert f"step {step}" in str(err) and rule in str(err)


# --------------------------------------------------------------------------
# Linearity
# --------------------------------------------------------------------------


def test_long_schedule_runs_with_bounded_work_per_step() -> None:
    """20,000 steps with timeouts, retries, watermarks and a full queue.

    The schedule is built while it runs (completing the oldest outstanding call), so it is well formed.
    The model's state stays bounded by the capacity, so the work per step does not grow with the
    schedule's length; the whole schedule must then run again through `flink_semantics.reference.run`.
    """
    cfg = {"mode": "unordered", "capacity": 16, "timeout": 40, "on_timeout": "complete",
           "timeout_result": [0], "retry": fixed(2, 3, if_empty=True)}
    model = reference.model_for(parse_schedule(cfg, ""))
    steps: list[str] = []
    largest = 0
    i = 0
    while len(steps) < 20_000:
        batch = [f"record {i} @{i}"] + ([f"watermark {i}"] if i % 7 == 0 else [])
        if model.outstanding() and i % 2 == 0:
            oldest = model.outstanding()[0]
            batch.append(f"complete r{oldest} {'[]' if i % 3 == 0 else [i]}")
        batch.append("advance 1")
        for line in batch:
            one = schedule_from_dict({"area": "async_io", "config": cfg, "steps": [parse_step(line)]},
                                     validate=False)
            model.apply(len(steps), one.steps[0])
            steps.append(line)
            held = model.queue_size() + len(model.pending_timers()) + len(model.outstanding())
            largest = max(largest, held)
        i += 1
    assert model.alive
    assert largest <= 4 * 16
    trace = reference.run(parse_schedule(cfg, "\n".join(steps)))
    assert sum(e.event == "emit" for e in trace) > 1000
