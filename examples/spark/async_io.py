"""async_map on a streaming DataFrame: an async lookup per record, Flink's async wait operator semantics.

A small stream of order ids (a Python streaming data source delivering two micro-batches) is
enriched by an `async def` lookup (an `asyncio.sleep` standing in for a remote call), at most 4
calls in flight per partition, in input order (AIO-12).  The query runs to completion with
`trigger(availableNow=True)` into a memory sink; the example checks that every order got exactly
the lookup's result, prints the rows and removes its temporary directory.

    python examples/spark/async_io.py
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from flink_semantics.adapters.pyspark.async_io import async_map
from flink_semantics.adapters.pyspark.session import get_spark
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

BATCHES = [[1, 2, 3, 4, 5], [6, 7, 8]]  # order ids, one list per micro-batch


class Orders(DataSource):
    """`spark.readStream.format("example_orders")`: the order ids of BATCHES, a batch per offset."""

    @classmethod
    def name(cls) -> str:
        return "example_orders"

    def schema(self) -> str:
        return "value long"

    def streamReader(self, schema: Any) -> OrdersReader:
        return OrdersReader()


class OrdersReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def initialOffset(self) -> dict[str, int]:
        return {"batch": -1}

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
        start = start or self.initialOffset()
        return {"batch": min(start["batch"] + 1, len(BATCHES) - 1)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition(b) for b in range(start["batch"] + 1, end["batch"] + 1)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        for order in BATCHES[partition.value]:
            yield (order,)

    def commit(self, end: dict[str, int]) -> None:
        pass


async def lookup(order: int) -> list[int]:
    """The remote call: the order's amount in cents, after a short wait."""
    await asyncio.sleep(0.01 * (order % 3))
    return [order * 100 + 1]


def main() -> None:
    spark = get_spark()
    spark.dataSource.register(Orders)
    checkpoint = tempfile.mkdtemp(prefix="async-io-example-")
    try:
        orders = spark.readStream.format("example_orders").load()
        enriched = async_map(orders, lookup, capacity=4, ordered=True, timeout=5.0)
        query = (enriched.writeStream.format("memory").queryName("enriched_orders")
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
        rows = spark.table("enriched_orders").collect()
        spark.catalog.dropTempView("enriched_orders")
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    got = sorted(r.value for r in rows)
    expected = sorted(asyncio.run(lookup(o))[0] for b in BATCHES for o in b)
    assert got == expected, (got, expected)
    assert all(r.kind == "R" for r in rows)
    for r in rows:
        print(r.kind, r.value)


if __name__ == "__main__":
    main()
