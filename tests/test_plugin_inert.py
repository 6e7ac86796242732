"""The conformance plugin is inert unless asked (issue 30): installed into an engine's own test
environment, it changes nothing in a session that does not run the suite, runs the suite only with
an adapter named, and never writes inside the installed package."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.hang import HANG_GUARD_S
from tests.test_suite_failures import PLUGIN, REPO

pytest_plugins = ["pytester"]

# An engine's own hypothesis tests, with a profile of their own (its conftest loads it): a test records
# the settings it runs with and the session's default.
ENGINE_CONFTEST = """
    from hypothesis import settings

    settings.register_profile("engine", max_examples=7, deadline=1234)
    settings.load_profile("engine")
"""
UNRELATED = """
    import json, os
    from hypothesis import given, settings, strategies as st

    @given(st.integers())
    def test_engine_property(x):
        s, own = settings.default, test_engine_property._hypothesis_internal_use_settings
        with open(os.environ["SETTINGS_OUT"], "w") as fh:
            json.dump({"derandomize": s.derandomize, "deadline_ms": s.deadline.total_seconds() * 1000,
                       "database": s.database is not None, "max_examples": s.max_examples,
                       "own_derandomize": own.derandomize, "own_database": own.database is not None,
                       "own_max_examples": own.max_examples}, fh)
"""
# The session without the plugin: the baseline the plugin must leave as it is.
WITHOUT = ("-p", "no:flink_semantics") if not PLUGIN else ()


@pytest.fixture
def clean_env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    for name in ("CONFORMANCE_ADAPTER", "CONFORMANCE_PROFILE", "CONFORMANCE_CORPUS"):
        monkeypatch.delenv(name, raising=False)
    out = pytester.path / "settings.json"
    monkeypatch.setenv("SETTINGS_OUT", str(out))
    return out


def engine_settings(pytester: pytest.Pytester, out: Path, *args: str) -> dict[str, object]:
    result = pytester.runpytest_subprocess(*args, "-p", "no:cacheprovider", timeout=HANG_GUARD_S)
    assert result.ret == 0, result.stdout.str()
    seen: dict[str, object] = json.loads(out.read_text())
    out.unlink()
    return seen


def test_an_unrelated_hypothesis_test_keeps_its_settings(pytester: pytest.Pytester, clean_env: Path) -> None:
    """With the plugin loaded, another suite's hypothesis test runs with the settings it has without
    the plugin: its own profile (7 examples, a 1234 ms deadline) and hypothesis' defaults for the rest
    (which differ on CI machines, where hypothesis loads its `ci` profile)."""
    pytester.makeconftest(ENGINE_CONFTEST)
    pytester.makepyfile(test_engine=UNRELATED)
    baseline = engine_settings(pytester, clean_env, *WITHOUT)
    assert (baseline["max_examples"], baseline["deadline_ms"]) == (7, 1234.0), baseline
    assert engine_settings(pytester, clean_env, *PLUGIN) == baseline
    assert not (pytester.path / ".pytest_cache").exists()  # no cache written by the plugin either


def test_the_plugin_registers_no_hypothesis_profile(pytester: pytest.Pytester, clean_env: Path) -> None:
    """The suite registers no profile: `default` is hypothesis' own, and there is no `thorough`."""
    pytester.makepyfile(test_profiles="""
        from hypothesis import settings

        def test_profiles():
            assert settings.get_profile("default").max_examples == 100
            assert set(settings._profiles) <= {"default", "ci", "debug"}, settings._profiles
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
    assert "pyflink, pyspark, pyspark-local, pyspark-stream, reference, spark-native" in err, err


def test_the_suite_applies_its_settings_to_its_own_properties_only(pytester: pytest.Pytester,
                                                                   clean_env: Path) -> None:
    """In one session with the suite and an unrelated test, the suite's properties run with the
    suite's settings (derandomized, 100 examples: their header and schedule counts say so) and the
    unrelated test keeps its own profile."""
    pytester.makeconftest(ENGINE_CONFTEST)
    pytester.makepyfile(test_engine=UNRELATED)
    result = pytester.runpytest_subprocess(str(REPO / "conformance" / "test_mini_batch.py"), "test_engine.py",
                                           "--adapter", "reference",
                                           "-k", "engine_property or test_processing_time",
                                           "-p", "no:cacheprovider", timeout=HANG_GUARD_S)
    out = result.stdout.str()
    assert result.ret == 0, out
    assert "conformance: profile default, derandomized: the same schedules every run" in out, out
    counts = re.search(r"test_processing_time_bundles \[.*\]: (\d+) schedules", out)
    assert counts and int(counts[1]) > 7 * 5, out  # far more than the engine profile's 7 examples allow
    seen = json.loads(clean_env.read_text())
    assert (seen["own_max_examples"], seen["deadline_ms"]) == (7, 1234.0), seen


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


def test_an_engines_own_output_stays_off_the_terminal(pytester: pytest.Pytester, clean_env: Path) -> None:
    """An engine process started in prepare() (as Spark's JVM is) prints at start and at each batch:
    none of it reaches the terminal of a passing run, since it runs inside pytest's output capture;
    with -s, which asks for all output, all of it does."""
    args = (str(REPO / "conformance" / "test_async_io.py"), "--adapter", "tests.noisy_engine:NoisyEngine",
            "-k", "capacity_and_admission", "-p", "no:cacheprovider")
    quiet = pytester.runpytest_subprocess(*args, timeout=HANG_GUARD_S)
    printed = quiet.stdout.str() + quiet.stderr.str()
    assert quiet.ret == 0, printed
    assert "ENGINE-" not in printed, printed
    loud = pytester.runpytest_subprocess(*args, "-s", timeout=HANG_GUARD_S)
    printed = loud.stdout.str() + loud.stderr.str()
    assert loud.ret == 0, printed
    assert all(line in printed for line in ("ENGINE-STARTED", "ENGINE-OUT", "ENGINE-ERR")), printed


def test_an_engine_that_fails_to_start_shows_what_it_printed(pytester: pytest.Pytester,
                                                           clean_env: Path) -> None:
    """When prepare() fails, what the engine printed while starting is shown with the reason."""
    result = pytester.runpytest_subprocess(str(REPO / "conformance" / "test_async_io.py"),
                                           "--adapter", "tests.noisy_engine:NoisyEngineFailing",
                                           "-p", "no:cacheprovider", timeout=HANG_GUARD_S)
    err = result.stderr.str()
    assert result.ret == 4, result.stdout.str() + err
    assert "conformance: the engine printed while it started:\n  ENGINE-DYING: no port free\n" in err, err
    assert "could not start: the engine exited while it started" in err, err
