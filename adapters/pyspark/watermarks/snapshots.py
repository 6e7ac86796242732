"""The engine's live state as JSON, and back: what a reader and a valve carry from one micro-batch to
the next in Spark's state store (api.py).

A micro-batch boundary is not a failover: in Flink a reader task lives on and keeps its generators'
maximum timestamps, idleness timers, partial watermarks, the last watermark and status it sent and
its alignment state.  In Spark every micro-batch runs a new task, so all of it is carried in the
group's state (`GroupState` of `applyInPandasWithState`), or every batch boundary would act as a
restart (WM-16 drops it only at a failover).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flink_semantics.adapters.pyspark.watermarks.engine import (
    BoundedOutOfOrderness,
    Generator,
    PausableClock,
    SourceReader,
    StatusWatermarkValve,
    WatermarkSampler,
    WithIdleness,
)


def _clock(c: PausableClock) -> list[int]:
    return [c.paused, c.blocked, c.blocked_since]


def _set_clock(c: PausableClock, d: list[int]) -> None:
    c.paused, c.blocked, c.blocked_since = d


def _generator(g: Generator) -> dict[str, Any]:
    if isinstance(g, BoundedOutOfOrderness):
        return {"max_ts": g.max_ts}
    if isinstance(g, WithIdleness):
        t = g.timer
        return {"inner": _generator(g.inner), "idle_now": g.idle_now,
                "timer": [t.counter, t.last_counter, t.start]}
    raise TypeError(f"no snapshot for generator {type(g).__name__}")


def _set_generator(g: Generator, d: dict[str, Any]) -> None:
    if isinstance(g, BoundedOutOfOrderness):
        g.max_ts = d["max_ts"]
    elif isinstance(g, WithIdleness):
        _set_generator(g.inner, d["inner"])
        g.idle_now = d["idle_now"]
        g.timer.counter, g.timer.last_counter, g.timer.start = d["timer"]
    else:
        raise TypeError(f"no snapshot for generator {type(g).__name__}")


def _sampler(s: WatermarkSampler) -> list[Any]:
    return [list(s.ring), s.latest]


def _set_sampler(s: WatermarkSampler, d: list[Any]) -> None:
    s.ring, s.latest = list(d[0]), d[1]


def snapshot_reader(reader: SourceReader) -> dict[str, Any]:
    """What `reader` carries to the next micro-batch, its alignment included: the announced maximum,
    the samplers (the reader's and each split's), the idle flags it keeps, the paused splits and
    whether it is blocked (the clocks they pause are in `clock`)."""
    partials, align = reader.mux.by_split, reader.align
    return {
        "splits": [[split, {"clock": _clock(s.clock), "generator": _generator(s.generator),
                            "partial": [partials[split].watermark, partials[split].idle],
                            "sampler": _sampler(align.splits[split])}]
                   for split, s in reader.splits.items()],
        "main": {"clock": _clock(reader.main_clock), "generator": _generator(reader.main_generator)},
        "combined": [reader.mux.status.combined, reader.mux.status.idle],
        "idleness": [reader.idleness.main.idle, reader.idleness.split_local.idle],
        "output": [reader.out.max_so_far, reader.out.idle],
        "available": [[split, ts] for split, ts in reader.available],
        "ending": reader.ending,
        "alignment": {"max_allowed": align.max_allowed, "latest": _sampler(align.latest),
                      "idle": align.idle, "idle_splits": sorted(align.idle_splits),
                      "paused": sorted(align.paused), "blocked": align.blocked},
    }


def restore_reader(reader: SourceReader, d: Mapping[str, Any]) -> None:
    """A fresh reader (no split yet) put in the state `d` of `snapshot_reader`."""
    for split, s in d["splits"]:
        reader.add_split(split)  # in the order they were added: the combination's order (WM-4)
        live = reader.splits[split]
        _set_clock(live.clock, s["clock"])
        _set_generator(live.generator, s["generator"])
        partial = reader.mux.by_split[split]
        partial.watermark, partial.idle = s["partial"]
        _set_sampler(reader.align.splits[split], s["sampler"])
    _set_clock(reader.main_clock, d["main"]["clock"])
    _set_generator(reader.main_generator, d["main"]["generator"])
    reader.mux.status.combined, reader.mux.status.idle = d["combined"]
    reader.idleness.main.idle, reader.idleness.split_local.idle = d["idleness"]
    reader.out.max_so_far, reader.out.idle = d["output"]
    reader.available = [(split, ts) for split, ts in d["available"]]
    reader.ending = d["ending"]
    align, a = reader.align, d["alignment"]
    align.max_allowed = a["max_allowed"]
    _set_sampler(align.latest, a["latest"])
    align.idle, align.blocked = a["idle"], a["blocked"]
    align.idle_splits, align.paused = set(a["idle_splits"]), set(a["paused"])
    if reader.ending:
        align.enabled = False


def snapshot_valve(valve: StatusWatermarkValve) -> dict[str, Any]:
    return {"channels": [[c.watermark, c.idle, c.aligned] for c in valve.state],
            "last": valve.last_watermark, "idle": valve.idle}


def restore_valve(valve: StatusWatermarkValve, d: Mapping[str, Any]) -> None:
    """A fresh valve put in the state `d` of `snapshot_valve` (its heap rebuilt from the aligned)."""
    for c, (watermark, idle, aligned) in zip(valve.state, d["channels"]):
        c.watermark, c.idle, c.aligned = watermark, idle, aligned
    valve.last_watermark = d["last"]
    valve.idle = d["idle"]
    valve.active = sum(not c.idle for c in valve.state)
    valve.heap = sorted((c.watermark, ch) for ch, c in enumerate(valve.state) if c.aligned)
