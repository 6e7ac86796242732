"""Load the conformance plugin when it is not installed as a pytest11 entry point.

With the package installed (`pip install -e .`), pytest loads `flink_semantics.conformance.plugin`
by itself; otherwise `pytest conformance` loads it from here.
"""

from __future__ import annotations

import importlib

import pytest


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    plugin = importlib.import_module("flink_semantics.conformance.plugin")
    if not pluginmanager.is_registered(plugin):
        pluginmanager.register(plugin, "flink_semantics.conformance.plugin")
