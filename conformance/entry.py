"""pytest's entry point for the suite: the plugin (conformance/plugin.py) where the `suite` extra is
installed, nothing elsewhere.

A Spark user installs `flink-semantics[spark]`, which brings no hypothesis; pytest still loads
every installed distribution's entry point in that user's own test runs, and an entry point that
imported hypothesis would break them at start.  pytest registers the modules named by a plugin's
`pytest_plugins`, so the plugin is named here only when hypothesis can be imported.
"""

from __future__ import annotations

import importlib.util

pytest_plugins = ["flink_semantics.conformance.plugin"] if importlib.util.find_spec("hypothesis") else []
