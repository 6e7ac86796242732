"""The Spark APIs a user imports load none of the conformance runners or the fault harness.

The import contract in pyproject.toml (`tox -e lint`) follows import statements; this follows what
Python really loads, package `__init__` files included: each API module is imported in a fresh
interpreter and the modules it brought are listed.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

API_MODULES = [f"flink_semantics.adapters.pyspark.{area}.api"
               for area in ("async_io", "sources", "watermarks", "key_groups", "mini_batch")]
# The runners and the harness: what a user's import must not bring
HARNESS = ("flink_semantics.adapters.pyspark.chaos", "flink_semantics.adapters.pyspark.runtime",
           "flink_semantics.adapters.pyspark.adapter", "flink_semantics.adapters.pyspark.streaming",
           "flink_semantics.adapters.pyspark.daemon", "flink_semantics.adapters.pyspark.runner_session",
           "flink_semantics.conformance", "flink_semantics.reference", "hypothesis", "pytest")
RUNNER_SUFFIXES = (".conformance", ".stream", ".scripted", ".faults")


@pytest.mark.parametrize("module", API_MODULES)
def test_an_api_module_loads_no_harness(module: str) -> None:
    """Importing the API (its package's __init__ included) loads no runner, no harness module, and
    neither hypothesis nor pytest."""
    probe = f"import sys, json, {module}; print(json.dumps(sorted(sys.modules)))"
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    loaded = json.loads(run.stdout.splitlines()[-1])
    bad = [m for m in loaded if m.startswith(HARNESS)
           or m.startswith("flink_semantics.adapters.pyspark.") and m.endswith(RUNNER_SUFFIXES)]
    assert bad == [], f"importing {module} loads {bad}"
