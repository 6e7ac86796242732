"""The conformance plugin is inert unless asked (issue 30): installed into an engine's own test
environment, it changes nothing in a session that does not run the suite, runs the suite only with
an adapter named, and never writes inside the installed package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.hang import HANG_GUARD_S
from tests.test_suite_failures import PLUGIN, REPO

pytest_plugins = ["pytester"]

# An engine's own hypothesis test: it records the settings it runs with and the session's default.
UNRELATED = """
    import json, os
    from hypothesis import given, settings, strategies as st

    @given(st.integers())
    def test_engine_property(x):
        s = settings.default
        with open(os.environ["SETTINGS_OUT"], "w") as fh:
            json.dump({"derandomize": s.derandomize, "deadline_ms": s.deadline.total_seconds() * 1000,
                       "database": s.database is not None, "max_examples": s.max_examples,
                       "own_derandomize": test_engine_property._hypothesis_internal_use_settings.derandomize,
                       "own_database": test_engine_property._hypothesis_internal_use_settings.database
                                       is not None}, fh)
"""


@pytest.fixture
def clean_env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    for name in ("CONFORMANCE_ADAPTER", "CONFORMANCE_PROFILE", "CONFORMANCE_CORPUS"):
        monkeypatch.delenv(name, raising=False)
    out = pytester.path / "settings.json"
    monkeypatch.setenv("SETTINGS_OUT", str(out))
    return out


def test_an_unrelated_hypothesis_test_keeps_hypothesis_defaults(pytester: pytest.Pytester,
                                                                clean_env: Path) -> None:
    """With the plugin loaded, another suite's hypothesis test runs with hypothesis' own defaults:
    random (not derandomized), the 200 ms deadline, an example database, 100 examples."""
    import json

    pytester.makepyfile(test_engine=UNRELATED)
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", timeout=HANG_GUARD_S)
    assert result.ret == 0, result.stdout.str()
    seen = json.loads(clean_env.read_text())
    assert seen == {"derandomize": False, "deadline_ms": 200.0, "database": True, "max_examples": 100,
                    "own_derandomize": False, "own_database": True}, seen
    assert not (pytester.path / ".pytest_cache").exists()  # no cache written by the plugin either


def test_the_plugin_registers_no_hypothesis_profile(pytester: pytest.Pytester, clean_env: Path) -> None:
    """A session's `--hypothesis-profile default` is hypothesis' own, not the suite's."""
    pytester.makepyfile(test_profiles="""
        from hypothesis import settings

        def test_profiles():
            assert settings.get_profile("default").derandomize is False
            assert settings.get_profile("default").database is not None
            assert "thorough" not in settings._profiles
    """)
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", timeout=HANG_GUARD_S)
    assert result.ret == 0, result.stdout.str()


def test_running_the_suite_without_an_adapter_is_a_usage_error(pytester: pytest.Pytester,
                                                               clean_env: Path) -> None:
    """No silent default adapter: the usage error lists the built-in ones."""
    result = pytester.runpytest_subprocess(str(REPO / "conformance" / "test_mini_batch.py"),
                                           "-p", "no:cacheprovider", timeout=HANG_GUARD_S)
    err = result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + err
    assert "the conformance suite needs an adapter: --adapter NAME" in err, err
    assert "pyflink, pyspark, pyspark-local, reference, spark-native" in err, err


def test_the_suite_applies_its_settings_to_its_own_properties_only(pytester: pytest.Pytester,
                                                                   clean_env: Path) -> None:
    """In one session with the suite and an unrelated test, the suite's properties run derandomized
    (their header says so) and the unrelated test keeps hypothesis' defaults."""
    import json

    pytester.makepyfile(test_engine=UNRELATED)
    result = pytester.runpytest_subprocess(str(REPO / "conformance" / "test_mini_batch.py"), "test_engine.py",
                                           "--adapter", "reference",
                                           "-k", "engine_property or test_processing_time",
                                           "-p", "no:cacheprovider", timeout=HANG_GUARD_S)
    out = result.stdout.str()
    assert result.ret == 0, out
    assert "conformance: profile default, derandomized: the same schedules every run" in out, out
    assert re.search(r"test_processing_time_bundles \[.*\]: [1-9]\d* schedules", out), out
    seen = json.loads(clean_env.read_text())
    assert (seen["own_derandomize"], seen["own_database"], seen["deadline_ms"]) == (False, True, 200.0), seen


def test_a_new_counterexample_is_saved_in_pytests_cache_not_in_the_package(pytester: pytest.Pytester,
                                                                           clean_env: Path) -> None:
    """Without --corpus, a failing run saves its counterexample under pytest's cache directory, says
    where, and leaves the shipped corpus as it was."""
    shipped = REPO / "conformance" / "corpus"
    before = sorted(shipped.rglob("*"))
    pytester.makeini("[pytest]\n")  # the engine's own configuration (this repository's disables the cache)
    result = pytester.runpytest_subprocess("-c", "tox.ini", str(REPO / "conformance" / "test_mini_batch.py"),
                                           "--adapter", "tests.strength_mutants:SizeCountsKeys",
                                           "--areas", "mini_batch", "-k", "test_processing_time_bundles",
                                           "--conformance-shrink", "no", timeout=HANG_GUARD_S)
    out = result.stdout.str()
    assert result.ret == 1, out
    saved = re.search(r"^counterexample saved to (\S+\.json)$", out, re.M)
    assert saved, out
    path = Path(saved[1])
    assert path.is_file() and ".pytest_cache" in path.parts and "flink_semantics_corpus" in path.parts, path
    assert sorted(shipped.rglob("*")) == before
