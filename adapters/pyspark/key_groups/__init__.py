"""The key groups area on Spark: key groups, routing, keyed and operator state on rescaling
(spec/key-groups.md).

* `engine.py`: JDK hash codes, Flink's murmur finalizer, Spark's hash(), key groups, ranges, the
  operator-state repartitioner and the keyed operator with its checkpoints and restores
  (standard library; rule IDs in comments);
* `spark.py`: the same hash, key group and subtask as native Spark expressions on a DataFrame
  column, and the exact placement of rows on the partition of their subtask;
* `api.py`: the public API, `keyed_process`, `start`, `rescale_state`, `checkpoint_config`;
* `conformance.py`: `Run`, a schedule of the area run on the engine in conformance mode, and
  `CAPABILITIES` (the `pyspark` runner);
* `stream.py`: the `pyspark-stream` runner's `run_many`, schedules through the public API.

Importing this package imports nothing: the library a user imports and the runners live apart.
"""
