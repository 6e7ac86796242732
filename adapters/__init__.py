"""Implementations under test.  Each adapter implements flink_semantics.spec.adapter.Adapter.

Built-in adapters: `reference` (adapters/reference.py, the model itself) and `pyspark`
(adapters/pyspark/, a real implementation on Apache Spark).  Adapters import `spec` only; the
one exception is adapters/reference.py, which exposes the reference model as an adapter.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
from typing import Any

from flink_semantics.spec.adapter import AdapterError
from flink_semantics.spec.area import get_area


def version(distribution: str, label: str) -> str | None:
    """"<label> <version>" of an installed distribution (an adapter's `version`), or None."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return f"{label} {installed(distribution)}"
    except PackageNotFoundError:
        return None


def check_java(adapter: str) -> None:
    """Raise AdapterError (one line, naming the adapter) when Java is missing or does not run."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise AdapterError(f"{adapter} adapter: Java not found (install Java 17 or set JAVA_HOME)")
    try:
        subprocess.run([java, "-version"], capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as e:
        raise AdapterError(f"{adapter} adapter: `{java} -version` failed: {e}") from None


def area_module(package: str, area: str) -> Any:
    """`<package>.<area>` (an adapter's module for an area), or None when it has none."""
    get_area(area)
    try:
        return importlib.import_module(f"{package}.{area}")
    except ModuleNotFoundError as e:
        if e.name != f"{package}.{area}":
            raise
        return None
