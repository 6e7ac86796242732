"""async_map on a streaming DataFrame: an async lookup per row, Flink's async wait operator semantics.

Orders arrive as JSON-lines files in a watched directory, written while the query runs.  Each order
is enriched by an `async def` lookup (an `asyncio.sleep` standing in for a remote call) that
returns a struct: the order's amount and its status.  At most 4 calls are in flight per partition,
in input order (AIO-12); the output keeps every column of the order and adds the lookup's columns.
The example checks that every order got exactly the lookup's result with its own columns intact,
prints the rows and removes its temporary directory.

    python examples/spark/async_io.py
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from pathlib import Path

from flink_semantics.adapters.pyspark.async_io import async_map
from flink_semantics.adapters.pyspark.session import get_spark

BATCHES = [[1, 2, 3, 4, 5], [6, 7, 8]]  # order ids, one file each
ORDERS = "order long, customer string"


def write_orders(inbox: Path, n: int, orders: list[int]) -> None:
    """One JSON-lines file of orders, moved into the watched directory whole."""
    staging = inbox.parent / f"orders-{n}.jsonl"
    staging.write_text("".join(json.dumps({"order": o, "customer": f"c{o % 3}"}) + "\n" for o in orders),
                       encoding="utf-8")
    os.replace(staging, inbox / staging.name)


async def lookup(order: int) -> list[tuple[dict[str, object], str]]:
    """The remote call: the order's amount in cents and its status, after a short wait."""
    await asyncio.sleep(0.01 * (order % 3))
    return [({"cents": order * 100 + 1, "paid": order % 2 == 0}, "ok")]


def main() -> None:
    spark = get_spark()
    root = Path(tempfile.mkdtemp(prefix="async-io-example-"))
    inbox = root / "in"
    inbox.mkdir()
    try:
        orders = spark.readStream.schema(ORDERS).json(str(inbox))
        enriched = async_map(orders, lookup, columns=["order"],
                             result="amount struct<cents: long, paid: boolean>, status string",
                             capacity=4, ordered=True, timeout=5.0)
        query = (enriched.writeStream.format("memory").queryName("enriched_orders")
                 .option("checkpointLocation", str(root / "checkpoint")).start())
        try:
            for n, batch in enumerate(BATCHES):  # a file arrives while the query runs
                write_orders(inbox, n, batch)
                query.processAllAvailable()
        finally:
            query.stop()
        rows = spark.table("enriched_orders").collect()
        spark.catalog.dropTempView("enriched_orders")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    got = sorted((r.order, r.customer, r.amount.cents, r.amount.paid, r.status) for r in rows)
    expected = sorted((o, f"c{o % 3}", amount["cents"], amount["paid"], status)
                      for b in BATCHES for o in b for amount, status in asyncio.run(lookup(o)))
    assert got == expected, (got, expected)
    for r in sorted(rows):
        print(r.order, r.customer, r.amount.cents, r.amount.paid, r.status)


if __name__ == "__main__":
    main()
