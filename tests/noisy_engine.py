"""Adapters over the reference whose engine process prints, as Spark's JVM and its Python workers do:
started in prepare(), it inherits the suite's stdout and stderr and writes to them later, while a
property runs (tests/test_plugin_inert.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

from flink_semantics.adapters.reference import ReferenceAdapter
from flink_semantics.spec.adapter import AdapterError
from flink_semantics.spec.schedule import Schedule, Trace

# The engine: says it started, then prints once on each line its input gets (its stdout and stderr).
ENGINE = ("import sys\n"
          "print('ENGINE-STARTED', file=sys.stderr, flush=True)\n"
          "for line in sys.stdin:\n"
          "    print('ENGINE-OUT', flush=True)\n"
          "    print('ENGINE-ERR', file=sys.stderr, flush=True)\n")


class NoisyEngine(ReferenceAdapter):
    """The reference, with an engine process started in prepare() that prints at each batch."""

    def prepare(self) -> None:
        self.engine = subprocess.Popen([sys.executable, "-c", ENGINE], stdin=subprocess.PIPE, text=True)

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        assert self.engine.stdin is not None
        self.engine.stdin.write("batch\n")
        self.engine.stdin.flush()
        return super().run_batch(schedules)

    def close(self) -> None:
        if getattr(self, "engine", None) is not None:
            assert self.engine.stdin is not None
            self.engine.stdin.close()
            self.engine.wait()
        super().close()


class NoisyEngineFailing(ReferenceAdapter):
    """An engine that prints and dies while it starts: prepare() says so."""

    def prepare(self) -> None:
        subprocess.run([sys.executable, "-c", "print('ENGINE-DYING: no port free')"], check=False)
        raise AdapterError("the engine exited while it started")
