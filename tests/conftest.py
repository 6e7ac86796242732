"""Make the repository root importable, so that tests can name `tests.wrong_adapters` and friends;
the hypothesis profile of these tests; the Spark session the Spark tests share; and the longest
test first."""

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# The project's own tests: the same examples every run, no deadline (no test fails because the
# machine is slow), no example database.  A profile of this test suite's, loaded here: the
# conformance plugin itself registers and loads none (it changes nothing in other sessions).
settings.register_profile("flink-semantics-tests", derandomize=True, deadline=None, database=None)
settings.load_profile("flink-semantics-tests")

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


# Run before the others, so that under xdist (-n 2) the longest test overlaps the rest instead of
# ending the run alone: building and installing the wheel takes 40 s of one worker.
FIRST = ("tests/test_wheel.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(FIRST))  # stable: the order otherwise kept


@pytest.fixture(scope="session")
def spark() -> Any:
    """The process's shared SparkSession; the test is skipped, with the reason, without Java or pyspark."""
    from flink_semantics.adapters.pyspark.runner_session import runner_spark
    from flink_semantics.spec.adapter import AdapterError

    try:
        return runner_spark()
    except AdapterError as e:
        pytest.skip(str(e))


# The Flink engine's command line (Main compiled once a module), for tests/test_flink_*.py.
from tests.flink_engine import engine  # noqa: E402, F401
