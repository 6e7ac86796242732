"""Load the conformance plugin when it is not installed as a pytest11 entry point.

With the package installed (`pip install -e .`), pytest loads `conformance.plugin` by itself; in a
plain checkout, `pytest conformance` loads it from here.
"""

from __future__ import annotations

import importlib

import pytest


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    plugin = importlib.import_module("conformance.plugin")
    if not pluginmanager.is_registered(plugin):
        pluginmanager.register(plugin, "conformance.plugin")
