"""Implementations under test.  Each adapter implements spec.adapter.Adapter.

Built-in adapters: `reference` (adapters/reference.py, the model itself) and `pyspark`
(adapters/pyspark/, a real implementation on Apache Spark).  Adapters import `spec` only; the
one exception is adapters/reference.py, which exposes the reference model as an adapter.
"""
