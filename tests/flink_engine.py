"""The Flink engine's command line for the tests that talk to Main directly (tests/test_flink_*.py):
Main compiled once a module into a temporary directory, and one conversation with it."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from flink_semantics.adapters import flink

from tests.hang import HANG_GUARD_S


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command line of Main, compiled into a temporary directory."""
    lib = flink.flink_lib()
    if lib is None:
        pytest.skip("the apache-flink 2.3.0 jars are not here ($FLINK_LIB, or tox -e conformance-pyflink)")
    javac, java = flink.jdk_tool("javac"), flink.jdk_tool("java")
    if javac is None or java is None:
        pytest.skip("no JDK (javac, java) on JAVA_HOME or PATH")
    classes = tmp_path_factory.mktemp("flink-engine")
    flink.compile_engine(lib, javac, classes)
    return [java, "-cp", f"{lib}/*:{classes}", flink.MAIN, str(flink.EXPECTED_FAILURES)]


def converse(engine: list[str], messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Main's lines (parsed) for the messages, and its exit status."""
    done = subprocess.run(engine, input="".join(json.dumps(m) + "\n" for m in messages), capture_output=True,
                          text=True, encoding="utf-8", timeout=HANG_GUARD_S)
    return [json.loads(line) for line in done.stdout.splitlines()], done.returncode
