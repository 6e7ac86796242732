"""Finding adapters by name: the built-in ones, or any `module:factory`.

Imports are lazy, so that choosing the reference adapter never imports pyspark.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from flink_semantics.spec.adapter import DEFAULT_BATCH_SIZE, Adapter, AdapterError

BUILTIN: dict[str, str] = {
    "reference": "flink_semantics.adapters.reference:ReferenceAdapter",
    "pyspark": "flink_semantics.adapters.pyspark:PySparkAdapter",
    # The same areas through the PySpark APIs a Spark user calls, in Structured Streaming queries:
    # the state store, checkpoints, query restarts and the shuffle carry the semantics.
    "pyspark-stream": "flink_semantics.adapters.pyspark.streaming:PySparkStreamAdapter",
    # The PySpark implementations and conformance runs without Spark: fast and independent of
    # the reference, so a large budget costs seconds.
    "pyspark-local": "flink_semantics.adapters.pyspark.runtime:LocalScriptedAdapter",
    # Spark's own semantics (withWatermark, ...), with the rules where Spark differs as expected
    # failures.
    "spark-native": "flink_semantics.adapters.spark_native:SparkNativeAdapter",
    # Apache Flink itself, through PyFlink on a local mini-cluster (the `pyflink` extra).
    "pyflink": "flink_semantics.adapters.pyflink:PyFlinkAdapter",
}


class UnknownAdapterError(AdapterError):
    """The adapter name is neither built in nor a `module:factory` path."""


def resolve(spec: str) -> str:
    """The `module:factory` path for an adapter name or path."""
    if spec in BUILTIN:
        return BUILTIN[spec]
    if ":" in spec:
        return spec
    known = ", ".join(sorted(BUILTIN))
    raise UnknownAdapterError(
        f"unknown adapter {spec!r}: use a built-in name ({known}) or 'module:factory'"
    )


def _factory(path: str) -> Any:
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise AdapterError(f"cannot import adapter module {module_name!r}: {e}") from e
    try:
        return getattr(module, attr)
    except AttributeError:
        raise AdapterError(f"adapter module {module_name!r} has no attribute {attr!r}") from None


def load_adapter(spec: str) -> Adapter:
    """Build the adapter named by `spec`.

    Raises AdapterError (with a one-line message) when it cannot be found, cannot be imported,
    its factory raises AdapterError, or what it builds is not an adapter.
    """
    factory = _factory(resolve(spec))
    adapter = factory()
    missing = [a for a in ("name", "completion_order", "capabilities", "run_batch", "close")
               if not hasattr(adapter, a)]
    if missing:
        raise AdapterError(f"{spec!r} did not build an adapter: it lacks {', '.join(missing)}")
    return adapter  # type: ignore[no-any-return]


def adapter_attribute(spec: str, name: str) -> Any:
    """An attribute the adapter's factory declares (read before the adapter is built), or None.

    A path attribute (such as `expected_failures`) relative to the factory's module is resolved."""
    try:
        factory = _factory(resolve(spec))
    except Exception:
        return None
    value = getattr(factory, name, None)
    if isinstance(value, str) and not os.path.isabs(value):
        module = sys.modules.get(getattr(factory, "__module__", ""), None)
        base = os.path.dirname(getattr(module, "__file__", "") or ".")
        value = os.path.join(base, value)
    return value


def budget_hints(spec: str) -> tuple[int, int | None]:
    """(batch_size, examples) declared by the adapter's factory (spec/adapter.py), without building it.

    Anything that goes wrong here gives the defaults: loading the adapter later reports the error.
    """
    try:
        factory = _factory(resolve(spec))
    except Exception:
        return DEFAULT_BATCH_SIZE, None
    batch = getattr(factory, "batch_size", DEFAULT_BATCH_SIZE)
    examples = getattr(factory, "examples", None)
    batch = batch if isinstance(batch, int) and batch > 0 else DEFAULT_BATCH_SIZE
    return batch, examples if isinstance(examples, int) and examples > 0 else None
