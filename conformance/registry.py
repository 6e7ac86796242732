"""Finding adapters by name: the built-in ones, any `module:factory`, or `process:<command line>`.

Imports are lazy, so that choosing the reference adapter never imports pyspark.  `process:` starts
the command (split as a shell would, without one) as an engine speaking docs/process-protocol.md.
"""

from __future__ import annotations

import importlib
import os
import shlex
import sys
from collections.abc import Callable
from typing import Any

from flink_semantics.adapters.process import ProcessAdapter
from flink_semantics.spec.adapter import DEFAULT_BATCH_SIZE, Adapter, AdapterError

BUILTIN: dict[str, str] = {
    "reference": "flink_semantics.adapters.reference:ReferenceAdapter",
    "pyspark": "flink_semantics.adapters.pyspark.adapter:PySparkAdapter",
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
    # Apache Flink 2.3.0's own Java classes, driven by a Java engine (adapters/flink/) compiled with
    # javac against the apache-flink jars, over the process protocol (docs/process-protocol.md).
    "flink": "flink_semantics.adapters.flink:FlinkAdapter",
}


PROCESS = "process:"  # `process:<command line>`: an engine speaking docs/process-protocol.md

# Adapters built by load_adapter that declare themselves in a handshake (a process adapter's hello),
# by name: what they declare is read from them once built (adapter_attribute, budget_hints).
_HANDSHAKEN: dict[str, Adapter] = {}


class UnknownAdapterError(AdapterError):
    """The adapter name is neither built in nor a `module:factory` path nor a `process:` command."""


def process_command(spec: str) -> list[str]:
    """The argv of a `process:<command line>` adapter name (split as a POSIX shell would)."""
    try:
        argv = shlex.split(spec.removeprefix(PROCESS))
    except ValueError as e:
        raise UnknownAdapterError(f"adapter {spec!r}: the command line does not parse: {e}") from None
    if not argv:
        raise UnknownAdapterError(f"adapter {spec!r}: give the engine's command after 'process:'")
    return argv


def resolve(spec: str) -> str:
    """The `module:factory` path for an adapter name or path (a `process:` name as it is)."""
    if spec in BUILTIN:
        return BUILTIN[spec]
    if spec.startswith(PROCESS):
        process_command(spec)
        return spec
    if ":" in spec:
        return spec
    known = ", ".join(sorted(BUILTIN))
    raise UnknownAdapterError(
        f"unknown adapter {spec!r}: use a built-in name ({known}), 'module:factory' or "
        "'process:<command line>'"
    )


def _process_factory(spec: str) -> Callable[[], ProcessAdapter]:
    argv = process_command(spec)
    return lambda: ProcessAdapter(argv)


def _factory(path: str) -> Any:
    if path.startswith(PROCESS):
        return _process_factory(path)
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
    """Build the adapter named by `spec`; a process adapter (docs/process-protocol.md) is started
    and has said hello, since its hello declares what the suite reads first.

    Raises AdapterError (with a one-line message) when it cannot be found, cannot be imported,
    its factory raises AdapterError, what it builds is not an adapter, or a process adapter's
    engine does not start or says no hello.
    """
    factory = _factory(resolve(spec))
    adapter = factory()
    if isinstance(adapter, ProcessAdapter):
        adapter.prepare()  # its error's first line says why; the engine's stderr tail follows
        _HANDSHAKEN[spec] = adapter
    missing = [a for a in ("name", "completion_order", "capabilities", "run_batch", "close")
               if not hasattr(adapter, a)]
    if missing:
        raise AdapterError(f"{spec!r} did not build an adapter: it lacks {', '.join(missing)}")
    return adapter  # type: ignore[no-any-return]


def _declared(factory: Any, spec: str, name: str) -> Any:
    """The factory's attribute; when it has none, a handshaken adapter's (once load_adapter built it)."""
    value = getattr(factory, name, None)
    if value is None and spec in _HANDSHAKEN:
        value = getattr(_HANDSHAKEN[spec], name, None)
    return value


def adapter_attribute(spec: str, name: str) -> Any:
    """An attribute the adapter's factory declares (read before the adapter is built), or None.

    A process adapter declares its attributes in its hello: they are read from it once built.
    A path attribute (such as `expected_failures`) relative to the factory's module is resolved."""
    try:
        factory = _factory(resolve(spec))
    except Exception:
        return None
    value = _declared(factory, spec, name)
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
    batch = _declared(factory, spec, "batch_size") or DEFAULT_BATCH_SIZE
    examples = _declared(factory, spec, "examples")
    batch = batch if isinstance(batch, int) and batch > 0 else DEFAULT_BATCH_SIZE
    return batch, examples if isinstance(examples, int) and examples > 0 else None
