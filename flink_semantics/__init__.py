"""flink_semantics: an executable specification of Apache Flink's runtime semantics and its conformance suite.

The one import namespace of the `flink-semantics` distribution:

* `flink_semantics.spec`: the rules (Markdown), the schedule vocabulary, the adapter protocol
  (`flink_semantics.spec.adapter.Adapter`, what an engine's adapter implements);
* `flink_semantics.reference`: the reference model, the oracle;
* `flink_semantics.conformance`: the pytest plugin, the suite and `python -m flink_semantics.conformance`;
* `flink_semantics.adapters`: the built-in adapters (reference, pyspark, spark-native, pyflink).

In the repository these are the top-level folders spec/, reference/, conformance/ and adapters/,
mapped into this namespace by pyproject.toml (`[tool.setuptools.package-dir]`); this folder holds
only this file and py.typed.  Install the project (`pip install -e .` in a checkout) to import it.
"""
