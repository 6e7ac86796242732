"""A Spark driver for tests/test_pyspark_sources_user.py, run as a subprocess the test kills.

    python tests/flip27_driver.py IN OUT CHECKPOINT BLOCK_AT

Reads the JSON-lines files of IN with the file source (`Flip27Source`, a small per-reader budget
so that the files take many micro-batches) into `IdempotentSink(OUT)`.  After the sink has written
micro-batch BLOCK_AT, before Spark commits it, the driver writes `OUT/_blocked` and waits: the test
kills it there (SIGKILL, the whole process group), a batch written and not committed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from flink_semantics.adapters.pyspark.sources.api import Flip27Source, IdempotentSink, flip27_options
from pyspark.sql import SparkSession

SCHEMA = "id long, file int, name string, score double"
BUDGET = 4096  # bytes per reader and micro-batch


class BlockAfter:
    """`after_write`: once batch `at` is written, say so and wait to be killed."""

    def __init__(self, out: str, at: int):
        self.out, self.at = out, at

    def __call__(self, batch_id: int) -> None:
        if batch_id == self.at:
            (Path(self.out) / "_blocked").write_text(str(batch_id))
            while True:
                time.sleep(1)


def main(source: str, out: str, checkpoint: str, block_at: int) -> None:
    spark = (SparkSession.builder.master("local[2]").appName("flip27-driver")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.dataSource.register(Flip27Source)
    options = flip27_options(source, readers=2, max_bytes_per_batch=BUDGET)
    df = spark.readStream.format("flip27").options(**options).schema(SCHEMA).load()
    query = (df.writeStream.foreachBatch(IdempotentSink(out, after_write=BlockAfter(out, block_at)))
             .option("checkpointLocation", checkpoint).start())
    query.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
