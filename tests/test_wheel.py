"""The suite as a user installs it: the wheel built from this checkout, installed into a fresh virtual
environment outside the repository, beside another distribution's top-level `adapters` package, and
run from another directory (docs/running-the-suite.md, "From a clone, or installed beside your engine").

Building the wheel and installing its dependencies needs the package index (or pip's cache).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DECOY = "another distribution's adapters"  # what the other distribution's `adapters` package holds
# What the suite and the tests use, and a Spark user's install must not bring
TEST_LIBRARIES = ("pytest", "pytest-xdist", "hypothesis", "matplotlib", "chispa")


def requirements(wheel: Path, extra: str | None) -> list[str]:
    """The names a wheel requires with `extra` (None: the core), from its METADATA."""
    with zipfile.ZipFile(wheel) as z:
        [meta] = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        lines = z.read(meta).decode().splitlines()
    names = []
    for line in lines:
        if line.startswith("Requires-Dist: "):
            spec, _, marker = line.removeprefix("Requires-Dist: ").partition(";")
            wanted = extra is None and not marker or extra is not None and f'extra == "{extra}"' in marker
            if wanted:
                names.append(re.split(r"[ <>=!~\[(]", spec.strip(), maxsplit=1)[0].lower())
    return names


def run(*args: str | Path, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """A command with an environment that does not point into the checkout."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CONFORMANCE_", "PYTHON", "VIRTUAL_ENV", "PIP_REQUIRE"))}
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_wheel_installs_beside_other_packages_and_runs_from_anywhere(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    built = run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", tmp_path / "dist", REPO,
                cwd=elsewhere)
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = (tmp_path / "dist").glob("flink_semantics-*.whl")
    # One top-level package, named after the project (and the distribution's metadata).
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"flink_semantics"}, tops
    # The core and the spark extra require nothing of the suite's or the tests'; the suite's extra does.
    for extra in (None, "spark"):
        assert not set(requirements(wheel, extra)) & set(TEST_LIBRARIES), (extra, requirements(wheel, extra))
    assert {"hypothesis", "pytest"} <= set(requirements(wheel, "suite")), requirements(wheel, "suite")

    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                    cwd=elsewhere).stdout.strip())
    # Another distribution that owns the top-level name `adapters` (as a popular one on the index does).
    (site / "adapters").mkdir()
    (site / "adapters" / "__init__.py").write_text(f"OWNER = {DECOY!r}\n")
    # A Spark user's install (here without pyspark itself) brings nothing of the suite's or the tests';
    # their own pytest still runs their own tests, the suite's plugin inert (conformance/entry.py).
    installed = run(python, "-m", "pip", "install", "--quiet", "--no-compile", wheel, "pytest", cwd=elsewhere)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    present = run(python, "-m", "pip", "list", "--format=freeze", cwd=elsewhere).stdout.lower()
    assert not [t for t in TEST_LIBRARIES if t != "pytest" and f"{t}==" in present], present
    project = tmp_path / "users-project"
    project.mkdir()
    (project / "test_users_own.py").write_text("def test_own():\n    assert 1 + 1 == 2\n")
    own = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_users_own.py", cwd=project)
    assert own.returncode == 0 and "1 passed" in own.stdout, own.stdout + own.stderr
    installed = run(python, "-m", "pip", "install", "--quiet", "--no-compile", f"{wheel}[suite]",
                    cwd=elsewhere)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    owner = run(python, "-c", "import adapters; print(adapters.OWNER)", cwd=elsewhere)
    assert owner.stdout.strip() == DECOY, owner.stdout + owner.stderr

    # The suite from another directory, found by its package name; the plugin comes from the entry point.
    suite = run(python, "-m", "pytest", "--pyargs", "flink_semantics.conformance", "--adapter", "reference",
                "--areas", "key_groups", "-p", "no:cacheprovider",
                "--conformance-report", tmp_path / "report.json", cwd=elsewhere)
    assert suite.returncode == 0, suite.stdout[-3000:] + suite.stderr[-3000:]
    assert "conformance: adapter reference (reference, version the suite's reference model" in suite.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    plugins = [line for line in suite.stdout.splitlines() if line.startswith("plugins: ")]
    assert plugins and "flink-semantics-" in plugins[0], plugins  # the plugin, by its entry point
    where = run(python, "-c", "import flink_semantics.conformance as c; print(c.__file__)", cwd=elsewhere)
    assert where.stdout.strip() == str(site / "flink_semantics" / "conformance" / "__init__.py"), where
    verdicts = {r["id"]: r["verdict"] for r in report["rules"]}
    assert verdicts["KG-1"] == "passed" and report["areas"] == ["key_groups"], report["areas"]
    assert not list(elsewhere.iterdir()), list(elsewhere.iterdir())  # nothing written where it ran

    # The command line, and the one-line error of a missing extra.
    schedule = json.dumps({"area": "key_groups", "config": {"parallelism": 2},
                           "steps": [{"op": "update", "key": 7}]})
    check = run(python, "-m", "flink_semantics.conformance", "check", "--json", schedule,
                "--adapter", "reference", cwd=elsewhere)
    assert check.returncode == 0, check.stdout + check.stderr
    spark = run(python, "-m", "flink_semantics.conformance", "check", "--json", schedule,
                "--adapter", "pyspark", cwd=elsewhere)
    assert spark.returncode == 3, spark.stdout + spark.stderr
    assert spark.stderr.strip().splitlines()[-1].endswith(
        "is not installed (the spark extra: pip install 'flink-semantics[spark]', or '.[spark]' in a clone)"
    ), spark.stderr
