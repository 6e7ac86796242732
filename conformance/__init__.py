"""The conformance suite: hypothesis strategies, the trace checker, the pytest plugin and a CLI.

Run it with `pytest conformance --adapter NAME`; see conformance/plugin.py for the options and
conformance/test_<area>.py for each area's properties.
"""
