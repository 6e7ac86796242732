"""The mini-batch aggregation area on Spark (spec/mini-batch.md).

* `engine.py`: the accumulators, what a bundle does to one key (one-phase, local, global), the
  assigners, bundles, valve and outputs, and `Pipeline`, one incarnation of the job (standard
  library; rule IDs in comments);
* `api.py`: the public API, `changelog_aggregate`, and `aggregation_state` (its accumulators at a
  committed batch, with Spark's state data source: the initial state of a restore);
* `conformance.py`: `Run`, a schedule of the area run on the engine in conformance mode, and
  `CAPABILITIES` (the `pyspark` runner);
* `stream.py`: the `pyspark-stream` runner's `run_many`, many schedules per query through
  `changelog_aggregate`.

Importing this package imports nothing: the library a user imports and the runners live apart.
"""
