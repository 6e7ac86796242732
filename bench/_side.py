"""What the side-by-side benchmarks share: the session a Spark engineer builds, the load, and the
sums of a query's StreamingQueryProgress (where a streaming query's time goes)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable
from typing import Any

SETTINGS = {
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}


def session(master: str = "local[2]", extra: dict[str, str] | None = None) -> Any:
    """A plain local session, its settings printed."""
    from pyspark.sql import SparkSession

    # the Python workers run this interpreter (the one with the project installed)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = {**SETTINGS, **(extra or {})}
    builder = SparkSession.builder.master(master).appName("side-by-side")
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print(
        f"session: master {master}; PYSPARK_PYTHON={os.environ['PYSPARK_PYTHON']}; "
        + "; ".join(f"{k}={v}" for k, v in settings.items())
    )
    return spark


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def durations(progress: Iterable[Any]) -> dict[str, float]:
    """durationMs summed over a query's progress entries (a dict or a StreamingQueryProgress), in s,
    with `batches` (those with input) and `rows`."""
    out: dict[str, float] = {"batches": 0, "rows": 0}
    for p in progress:
        d = p if isinstance(p, dict) else p.jsonValue if hasattr(p, "jsonValue") else dict(p)
        if callable(d):
            d = d()
        rows = int(d.get("numInputRows", 0))
        out["rows"] += rows
        out["batches"] += 1 if rows else 0
        for k, v in (d.get("durationMs") or {}).items():
            out[k] = out.get(k, 0.0) + v / 1000
    return out


def first_trigger(progress: list[dict[str, Any]]) -> float | None:
    """The epoch seconds at which the query's first trigger began (its progress's `timestamp`)."""
    import datetime

    if not progress:
        return None
    ts = progress[0]["timestamp"].replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(ts).timestamp()


def progress_list(query: Any) -> list[dict[str, Any]]:
    import json

    return [json.loads(p.json) if hasattr(p, "json") else p for p in query.recentProgress]


def wait_rows(query: Any, total: int, timeout: float = 600.0, extra_batches: int = 0) -> float:
    """Poll until the query's progress counts `total` input rows (and `extra_batches` more entries
    after that); the wall time from the call.  Raises if the query failed."""
    t0 = time.monotonic()
    seen_at: int | None = None
    while time.monotonic() - t0 < timeout:
        if query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
        ps = progress_list(query)
        got = sum(int(p.get("numInputRows", 0)) for p in ps)
        if got >= total:
            if seen_at is None:
                seen_at = len(ps)
            if len(ps) - seen_at >= extra_batches:
                return time.monotonic() - t0
        time.sleep(0.2)
    raise TimeoutError(f"query saw fewer than {total} rows in {timeout} s")


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)
