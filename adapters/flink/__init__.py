"""`flink`: the conformance suite against Apache Flink 2.3.0's own Java classes, over the process protocol.

The engine is a Java program of this project (`adapters/flink/java/org/flinksemantics/engine/`):
`Main` speaks docs/process-protocol.md on stdin and stdout and hands each schedule to the engine of
its area, `org.flinksemantics.engine.<Area>Engine` (an `AreaEngine`; key groups:
`KeyGroupsEngine`), which runs it on Flink's classes themselves: each step calls the Flink class
its rule is about (`KeyGroupRangeAssignment`, `MathUtils`, the heap keyed and default operator
state backends, `StateAssignmentOperation`, `RoundRobinOperatorStateRepartitioner`, the scheduler's
`VertexParallelismInformation`), with thin glue where a class needs its inputs built.  An area
without an engine class is unsupported ("no engine for this area yet") in the engine's hello.
Expected failures: `adapters/flink/expected-failures/<area>.json` ({rule: reason naming Flink's
class}), which `Main` reads from the directory given as its argument and declares in its hello.

`FlinkAdapter` compiles the Java files with `javac` against the apache-flink 2.3.0 jars into a
temporary directory (removed on close; nothing is written inside the installed package), then
runs `java -cp <jars>:<classes> org.flinksemantics.engine.Main <expected-failures dir>` behind
`ProcessAdapter` (adapters/process.py).  The jars: $FLINK_LIB, else `pyflink/lib` of the
interpreter's apache-flink, else of the tox env `conformance-pyflink`.  No build tool, nothing
downloaded: `javac` and `java` (Java 17) from JAVA_HOME or PATH.  This adapter never imports
`reference/`.

    pytest conformance --adapter flink_semantics.adapters.flink:FlinkAdapter --areas <area>
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tempfile
import weakref
from pathlib import Path

from flink_semantics.adapters.process import ProcessAdapter
from flink_semantics.spec.adapter import AdapterError

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "java"
EXPECTED_FAILURES = HERE / "expected-failures"
MAIN = "org.flinksemantics.engine.Main"
DIST_JAR = "flink-dist-2.3.0.jar"
COMPILE_GUARD_S = 600.0  # hang guard of javac (a loaded machine takes seconds)


def flink_lib() -> Path | None:
    """The directory of the apache-flink 2.3.0 jars: $FLINK_LIB, else pyflink/lib of this interpreter's
    apache-flink, else of the tox env conformance-pyflink of the checkout; None when there is none."""
    candidates = [Path(os.environ["FLINK_LIB"])] if os.environ.get("FLINK_LIB") else []
    spec = importlib.util.find_spec("pyflink")
    if spec is not None and spec.origin is not None:
        candidates.append(Path(spec.origin).parent / "lib")
    tox_env = HERE.parent.parent / ".tox" / "conformance-pyflink"
    candidates += sorted(tox_env.glob("lib/python*/site-packages/pyflink/lib"))
    return next((c for c in candidates if (c / DIST_JAR).is_file()), None)


def jdk_tool(name: str) -> str | None:
    """`javac` or `java` of $JAVA_HOME, else of PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / name).is_file():
        return str(Path(home) / "bin" / name)
    return shutil.which(name)


def prerequisites() -> tuple[Path, str, str]:
    """(jars, javac, java); AdapterError naming what is missing."""
    lib = flink_lib()
    if lib is None:
        raise AdapterError(f"flink adapter: no apache-flink 2.3.0 jars ({DIST_JAR}): set FLINK_LIB to their "
                           "directory or install apache-flink 2.3.0 (tox -e conformance-pyflink)")
    javac, java = jdk_tool("javac"), jdk_tool("java")
    if javac is None or java is None:
        raise AdapterError("flink adapter: no JDK (javac and java, Java 17) on JAVA_HOME or PATH")
    return lib, javac, java


def compile_engine(lib: Path, javac: str, into: Path) -> None:
    """javac every source of adapters/flink/java into `into`; AdapterError with javac's output."""
    java_files = sorted(str(p) for p in SOURCES.rglob("*.java"))
    try:
        done = subprocess.run([javac, "-encoding", "UTF-8", "-nowarn", "-cp", f"{lib}/*", "-d", str(into),
                               *java_files], capture_output=True, text=True, timeout=COMPILE_GUARD_S)
    except (OSError, subprocess.SubprocessError) as e:
        raise AdapterError(f"flink adapter: javac did not run: {e}") from None
    if done.returncode != 0:
        raise AdapterError(f"flink adapter: javac failed:\n{done.stdout}{done.stderr}")


class FlinkAdapter(ProcessAdapter):
    """Flink 2.3.0's Java classes, one engine per area, behind the process protocol."""

    def __init__(self) -> None:
        lib, self._javac, java = prerequisites()
        self._lib = lib
        self._classes = Path(tempfile.mkdtemp(prefix="flink-engine-"))
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._classes, ignore_errors=True)
        self._compiled = False
        super().__init__([java, "-Xss4m", "-cp", f"{lib}/*{os.pathsep}{self._classes}", MAIN,
                          str(EXPECTED_FAILURES)])

    def prepare(self) -> None:
        """Compile the engine (once), then start it and read its hello."""
        if not self._compiled:
            compile_engine(self._lib, self._javac, self._classes)
            self._compiled = True
        super().prepare()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._cleanup()
