"""Flink 2.3.0's own valve against the wrong adapter that stands for it (deviation D1 of
spec/watermarks.md).

`FlinkValve230` (tests/wrong_watermarks.py) is the valve of Flink 2.3.0, before the FLINK-40475 fix
that this spec follows.  Here `org.apache.flink.streaming.runtime.watermarkstatus.StatusWatermarkValve`
of the apache-flink 2.3.0 jars gets the same inputs, driven by a small Java program (below, compiled
with `javac`), and must give the same outputs, input by input.  The inputs are what the readers send
in the reference's traces (their `watermark` and `status` events, in order: the valve's channels) of
D1's two examples (WM-19's and WM-20's second examples) and of schedules drawn as `test_valve` draws
them.  On the two examples Flink's outputs are also the ones D1 says 2.3.0 gives, and the
reference's valve differs from them there.

Marked `pyflink`: `tox -e conformance-pyflink` runs it with the adapter's tests.  Skipped, with the
reason, without a JDK (`javac`, `java` on PATH) or without the jars: $FLINK_LIB, else `pyflink/lib`
of the interpreter's apache-flink or of the tox env `conformance-pyflink` (which installs
apache-flink 2.3.0).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from flink_semantics.conformance.areas.watermarks import schedules
from flink_semantics.conformance.test_watermarks import FEATURES
from flink_semantics.reference import expected_trace
from flink_semantics.reference.watermarks import Valve
from flink_semantics.spec.area import get_area
from flink_semantics.spec.schedule import Event, Schedule, schedule_from_dict
from hypothesis import HealthCheck, given, settings

from tests.hang import HANG_GUARD_S
from tests.wrong_watermarks import _FlushUnfixed, _StallUnfixed, _Valve230

# Run with the other tests of Flink itself by `tox -e conformance-pyflink` (`pytest tests -m pyflink`).
pytestmark = pytest.mark.pyflink

REPO = Path(__file__).resolve().parent.parent
AREA = get_area("watermarks")

Input = tuple[str, int, int]  # ("w", channel, watermark) or ("i"/"a", channel, 0): IDLE / ACTIVE

# Reads one sequence a line, "<channels> <input> <input> ...", each input `w<channel>=<value>`,
# `i<channel>` (IDLE) or `a<channel>` (ACTIVE), every sequence on a new valve; prints one line per
# sequence: per input, what the valve emitted (`<value>`, `idle`, `active`, comma-separated), the
# inputs separated by `|`.
JAVA = r"""
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;
import org.apache.flink.runtime.event.WatermarkEvent;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.io.PushingAsyncDataInput;
import org.apache.flink.streaming.runtime.streamrecord.LatencyMarker;
import org.apache.flink.streaming.runtime.streamrecord.RecordAttributes;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.watermarkstatus.StatusWatermarkValve;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;

public class ValveRun {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String[] words = line.trim().split(" ");
            StatusWatermarkValve valve = new StatusWatermarkValve(Integer.parseInt(words[0]));
            List<String> emitted = new ArrayList<>();
            PushingAsyncDataInput.DataOutput<Object> out = new PushingAsyncDataInput.DataOutput<Object>() {
                public void emitRecord(StreamRecord<Object> r) {}
                public void emitWatermark(Watermark w) { emitted.add(Long.toString(w.getTimestamp())); }
                public void emitWatermarkStatus(WatermarkStatus s) {
                    emitted.add(s.isIdle() ? "idle" : "active");
                }
                public void emitLatencyMarker(LatencyMarker m) {}
                public void emitRecordAttributes(RecordAttributes a) {}
                public void emitWatermark(WatermarkEvent e) {}
            };
            StringBuilder result = new StringBuilder();
            for (int i = 1; i < words.length; i++) {
                String w = words[i];
                emitted.clear();
                if (w.startsWith("w")) {
                    String[] p = w.substring(1).split("=");
                    valve.inputWatermark(new Watermark(Long.parseLong(p[1])), Integer.parseInt(p[0]), out);
                } else {
                    WatermarkStatus s = w.startsWith("i") ? WatermarkStatus.IDLE : WatermarkStatus.ACTIVE;
                    valve.inputWatermarkStatus(s, Integer.parseInt(w.substring(1)), out);
                }
                result.append(i > 1 ? "|" : "").append(String.join(",", emitted));
            }
            System.out.println(result);
        }
    }
}
"""


def flink_lib() -> Path | None:
    """The directory of the apache-flink 2.3.0 jars, if there is one."""
    candidates = [Path(os.environ["FLINK_LIB"])] if os.environ.get("FLINK_LIB") else []
    spec = importlib.util.find_spec("pyflink")
    if spec is not None and spec.origin is not None:
        candidates.append(Path(spec.origin).parent / "lib")
    tox_env = REPO / ".tox" / "conformance-pyflink"
    candidates += sorted(tox_env.glob("lib/python*/site-packages/pyflink/lib"))
    return next((c for c in candidates if (c / "flink-dist-2.3.0.jar").is_file()), None)


@pytest.fixture(scope="module")
def flink_valve(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A function: sequences of inputs (3 channels) -> Flink 2.3.0's outputs, input by input."""
    lib = flink_lib()
    if lib is None:
        pytest.skip("the apache-flink 2.3.0 jars are not here ($FLINK_LIB, or tox -e conformance-pyflink)")
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("no JDK (javac, java) on PATH")
    work = tmp_path_factory.mktemp("valve230")
    (work / "ValveRun.java").write_text(JAVA, encoding="utf-8")
    classpath = f"{lib}/*{os.pathsep}{work}"
    subprocess.run(["javac", "-cp", classpath, "-d", str(work), str(work / "ValveRun.java")], check=True,
                   timeout=HANG_GUARD_S)

    def run(sequences: list[list[Input]]) -> list[list[list[str]]]:
        lines = [" ".join(["3", *(f"w{c}={v}" if k == "w" else f"{k}{c}" for k, c, v in seq)])
                 for seq in sequences]
        done = subprocess.run(["java", "-cp", classpath, "ValveRun"], input="\n".join(lines) + "\n",
                              capture_output=True, text=True, check=True, timeout=HANG_GUARD_S)
        out = done.stdout.splitlines()
        assert len(out) == len(sequences), done.stdout + done.stderr
        return [[[x for x in part.split(",") if x] for part in line.split("|")] if seq else []
                for seq, line in zip(sequences, out)]

    return run


def valve_inputs(events: tuple[Event, ...] | list[Event]) -> list[Input]:
    """What the readers send, in order: the valve's inputs (no failover in these schedules)."""
    out: list[Input] = []
    for e in events:
        if e.event == "watermark":
            out.append(("w", e.reader, e.value))
        elif e.event == "status":
            out.append(("i" if e.idle else "a", e.reader, 0))
        assert e.event != "restarted"
    return out


def model_valve(valve_type: type[Valve], inputs: list[Input]) -> list[list[str]]:
    """A model's valve (3 channels) fed the inputs: what it emitted at each, as Flink's run prints it."""
    emitted: list[Event] = []
    valve = valve_type(3, emitted.append, lambda: 0)
    out = []
    for kind, channel, value in inputs:
        before = len(emitted)
        if kind == "w":
            valve.watermark(channel, value)
        else:
            valve.status(channel, kind == "i")
        out.append([str(e.value) if e.event == "output_watermark" else ("idle" if e.idle else "active")
                    for e in emitted[before:]])
    return out


def example(config: str, steps: list[str]) -> Schedule:
    n = AREA.notation
    return schedule_from_dict({"area": "watermarks", "config": n.parse_config(config),
                               "steps": [n.parse_step(s) for s in steps]})


# D1's examples (spec/watermarks.md, WM-19's and WM-20's second examples).
FLUSH = example("readers=3 interval=10 idleness=5", [
    "add r0 s0", "add r1 s1", "add r2 s2", "record s0 11", "record s1 6", "record s2 31", "tick 10",
    "record s0 11", "tick 10", "record s0 11", "tick 10", "record s1 8", "tick 10", "record s1 8", "tick 10",
    "tick 20"])
STALL = example("readers=3 interval=10 idleness=5", [
    "add r0 s0", "add r1 s1", "add r2 s2", "record s1 10", "record s0 16", "tick 10", "record s0 16",
    "record s1 10", "tick 10", "record s1 10", "tick 10", "record s1 10", "tick 10", "record s2 5", "tick 10",
    "record s2 5", "tick 10", "record s0 26", "tick 10"])


def test_d1_examples_on_flinks_own_valve(flink_valve) -> None:  # type: ignore[no-untyped-def]
    """D1 as spec/watermarks.md states it: the valve inputs of the two examples, and what Flink 2.3.0
    emits for them, where the reference's valve emits more."""
    flush, stall = valve_inputs(expected_trace(FLUSH).events), valve_inputs(expected_trace(STALL).events)
    assert flush == [("w", 0, 10), ("w", 1, 5), ("w", 2, 30), ("i", 1, 0), ("i", 2, 0), ("a", 1, 0),
                     ("w", 1, 7), ("i", 0, 0), ("i", 1, 0)]
    assert stall == [("w", 0, 15), ("w", 1, 9), ("i", 2, 0), ("i", 0, 0), ("a", 2, 0), ("w", 2, 4),
                     ("i", 1, 0), ("a", 0, 0), ("w", 0, 25)]
    got_flush, got_stall = flink_valve([flush, stall])
    assert got_flush == [[], [], ["5"], ["10"], [], [], [], [], ["idle"]]  # no flush of 30
    assert got_stall == [[], [], ["9"], [], [], [], [], [], ["25"]]  # nothing on ACTIVE, then 25
    assert model_valve(Valve, flush)[-1] == ["30", "idle"]
    assert model_valve(Valve, stall)[-2:] == [["15"], ["25"]]


def test_the_issue_sequence_on_flinks_own_valve(flink_valve) -> None:  # type: ignore[no-untyped-def]
    """The sequence of the issue that found the stall in schedules: Flink 2.3.0 emits nothing and then
    25, the fixed valve (the reference's) 15 and then 25."""
    issue: list[Input] = [("w", 1, 9), ("w", 0, 15), ("i", 2, 0), ("i", 0, 0), ("a", 2, 0), ("w", 2, -3),
                          ("i", 1, 0), ("a", 0, 0), ("w", 0, 25)]
    (got,) = flink_valve([issue])
    assert got == [[], [], ["9"], [], [], [], [], [], ["25"]]
    assert got == model_valve(_Valve230, issue)
    assert model_valve(Valve, issue)[-2:] == [["15"], ["25"]]


def drawn_valve_inputs(n: int) -> list[list[Input]]:
    """The valve inputs of the reference's traces of n schedules drawn as test_valve draws them."""
    out: list[list[Input]] = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(schedules(FEATURES["test_valve"]))
    def collect(schedule: Schedule) -> None:
        out.append(valve_inputs(expected_trace(schedule).events))

    collect()
    return out


def test_flink_valve_230_is_flinks_own(flink_valve) -> None:  # type: ignore[no-untyped-def]
    """On the valve inputs of drawn schedules, FlinkValve230's valve emits what Flink 2.3.0's does,
    input by input; and among them are inputs where the reference's valve emits otherwise, for
    each half of D1 alone (the valves of FlinkValve230Flush and FlinkValve230Stall)."""
    sequences = drawn_valve_inputs(300)
    flink = flink_valve(sequences)
    halves = {_FlushUnfixed: 0, _StallUnfixed: 0}
    for seq, got in zip(sequences, flink):
        assert model_valve(_Valve230, seq) == got, seq
        for half in halves:
            halves[half] += model_valve(Valve, seq) != got and model_valve(half, seq) == got
    assert all(halves.values()), halves
