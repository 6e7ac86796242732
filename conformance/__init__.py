"""The conformance suite: hypothesis strategies, the trace checker, the pytest plugin and a CLI.

Run it with `pytest conformance --adapter NAME`; see conformance/plugin.py for the options and
conformance/test_async_io.py for the properties.
"""
