"""Make the repository root importable, so that tests can name `tests.wrong_adapters` and friends;
and the Spark session the Spark tests share."""

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(scope="session")
def spark() -> Any:
    """The process's shared SparkSession; the test is skipped, with the reason, without Java or pyspark."""
    from flink_semantics.adapters.pyspark.session import get_spark
    from flink_semantics.spec.adapter import AdapterError

    try:
        return get_spark()
    except AdapterError as e:
        pytest.skip(str(e))
