"""A test adapter that declares FREE completion order and emits a legal order different from the
reference: within every unordered segment (between watermarks and statuses) the records' result
runs come in reverse.  FREE checking must accept it."""

from __future__ import annotations

from flink_semantics.spec.adapter import FREE
from flink_semantics.spec.areas.async_io import event
from flink_semantics.spec.schedule import OUTPUT, Event, Schedule, Trace

from tests.wrong_adapters import ReferenceWrapper


def reverse_segments(outputs: list[Event]) -> list[Event]:
    """Reverse the order of the record runs between consecutive watermarks/statuses."""
    out: list[Event] = []
    runs: list[list[Event]] = []
    for e in outputs + [event(-1, "watermark", timestamp=None)]:
        if e.event == "emit":
            if runs and runs[-1][0].record == e.record:
                runs[-1].append(e)
            else:
                runs.append([e])
            continue
        for run in reversed(runs):
            out += run
        runs = []
        out.append(e)
    return out[:-1]


class FreeOrderAdapter(ReferenceWrapper):
    completion_order = FREE

    def __init__(self) -> None:
        super().__init__()
        self.name = "free-order"

    def run(self, schedule: Schedule) -> Trace:
        trace = super().run(schedule)
        if schedule.config.mode != "unordered":
            return trace
        outputs = iter(reverse_segments([e for e in trace.events if e.group == OUTPUT]))
        return Trace(tuple(next(outputs) if e.group == OUTPUT else e for e in trace.events))


class FreeInAsyncIoOnly(FreeOrderAdapter):
    """FREE in async I/O only, SCRIPTED in the other areas (a per-area `completion_order`, as the
    pyflink adapter declares): their traces are the reference's."""

    completion_order = {"async_io": FREE}

    def __init__(self) -> None:
        super().__init__()
        self.name = "free-in-async-io"

    def run(self, schedule: Schedule) -> Trace:
        if schedule.area != "async_io":
            return ReferenceWrapper.run(self, schedule)
        return super().run(schedule)
