"""Counterexample timelines (conformance/draw.py), checked the way a person looks at them: the lanes
of the schedule are there, each step and event has its mark, watermarks are vertical lines, the
events that differ are circled and the first divergent step is highlighted, in the SVG's structure."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from flink_semantics.conformance.checker import compare
from flink_semantics.conformance.cli import main, run_one
from flink_semantics.conformance.draw import draw_counterexample, lane_order, slug, timeline_of
from flink_semantics.conformance.examples import load_examples
from flink_semantics.reference import expected_trace
from flink_semantics.spec.area import DEFAULT_TIMELINE, Mark, areas, get_area, register, unregister
from flink_semantics.spec.schedule import Schedule, Trace, schedule_from_dict

from tests.hang import HANG_GUARD_S

REPO = Path(__file__).resolve().parent.parent
WRONG = "tests.wrong_adapters:CapacityOffByOne"  # admits one element more than the capacity
# Capacity 2: the watermark and the third record wait for room; the wrong adapter lets the third
# record in when the first completes (step 5), one step early (the shrunk counterexample of
# docs/counterexample.json, the picture in docs/running-the-suite.md).
KNOWN = REPO / "docs" / "counterexample.json"


def known() -> Schedule:
    return schedule_from_dict(json.loads(KNOWN.read_text()), validate=False)


def svg_ids(path: Path) -> dict[str, ET.Element]:
    return {e.attrib["id"]: e for e in ET.parse(path).getroot().iter() if "id" in e.attrib}


def texts(e: ET.Element) -> str:
    return " ".join(t.strip() for t in e.itertext() if t.strip())


def marks(ids: dict[str, ET.Element], panel: str) -> Counter[str]:
    """How many marks of each kind a panel has: ids `mark-<mark>-<panel>-<n>`."""
    return Counter(m[1] for i in ids if (m := re.fullmatch(rf"mark-(\w+)-{panel}-\d+", i)))


def lanes(ids: dict[str, ET.Element], panel: str) -> set[str]:
    return {i.removeprefix(f"lane-{panel}-") for i in ids if i.startswith(f"lane-{panel}-")}


def xs(e: ET.Element) -> list[float]:
    """The x coordinates an SVG group draws at: its markers' (<use x=…>), else its paths' points."""
    out = [float(u.attrib["x"]) for u in e.iter() if u.tag.endswith("use") and "x" in u.attrib]
    if out:
        return out
    for p in e.iter():
        if p.tag.endswith("path") and "d" in p.attrib:
            numbers = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", p.attrib["d"])]
            out += numbers[0::2]
    return out


@pytest.fixture(scope="module")
def counterexample(tmp_path_factory: pytest.TempPathFactory) -> tuple[Schedule, Trace, Trace, int, Path]:
    schedule = known()
    expected = expected_trace(schedule)
    name, order, observed = run_one(WRONG, schedule)
    mismatch = compare(schedule, expected, observed, order)
    assert mismatch is not None and mismatch.step == 5 and "AIO-7" in mismatch.rules
    stem = tmp_path_factory.mktemp("draw") / "known"
    paths = draw_counterexample(schedule, expected, observed, mismatch.step, adapter_name=name, stem=stem,
                                rules=mismatch.rules, what=mismatch.what)
    assert paths == [stem.with_suffix(".svg"), stem.with_suffix(".png")]
    return schedule, expected, observed, mismatch.step, paths[0]


def test_the_known_counterexample_has_its_lanes(counterexample) -> None:  # type: ignore[no-untyped-def]
    *_, svg = counterexample
    ids = svg_ids(svg)
    assert lanes(ids, "schedule") == {"record-0", "record-1", "record-2", "input", "clock", "operator"}
    assert lanes(ids, "expected") == lanes(ids, "observed") == {"record-0", "record-1", "record-2",
                                                                "operator", "output"}
    assert svg.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_step_and_event_has_its_mark(counterexample) -> None:  # type: ignore[no-untyped-def]
    schedule, expected, observed, _, svg = counterexample
    ids = svg_ids(svg)
    assert marks(ids, "step") == {"record": 3, "completion": 3, "watermark": 1, "checkpoint": 1, "other": 3}
    for panel, trace in (("expected", expected), ("observed", observed)):
        assert marks(ids, panel) == {"call": 3, "output": 3, "watermark": 1, "checkpoint": 1, "other": 1}
        assert sum(marks(ids, panel).values()) == len(trace)
    # A watermark is a vertical line across its lane; a record a marker; each mark has its text.
    (line,) = [e for i, e in ids.items() if i.startswith("mark-watermark-step-")]
    path = next(p for p in line.iter() if p.tag.endswith("path"))
    x0, y0, x1, y1 = (float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", path.attrib["d"])[:4])
    assert x0 == x1 and abs(y1 - y0) > 10
    assert any(u.tag.endswith("use") for u in ids["mark-record-step-0"].iter())
    assert texts(ids["mark-checkpoint-step-6"]) == "6: checkpoint id=1"
    assert "watermark 20" in texts(ids["label-mark-watermark-step-2"])
    # Processing time under the step numbers, where it moved.
    assert "10 ms" in ET.tostring(ids["axes_3"], encoding="unicode")


def test_the_first_divergent_step_is_highlighted(counterexample) -> None:  # type: ignore[no-untyped-def]
    _, expected, observed, step, svg = counterexample
    ids = svg_ids(svg)
    assert "first divergence: step 5" in texts(ids["divergence"])
    title = texts(ids["title"])
    assert "CapacityOffByOne" in title and "AIO-7" in title and "first divergence at step 5" in title
    # The shading of every panel is centred on the step's column: on the step's own mark.
    (x_step,) = xs(ids["mark-completion-step-5"])
    for panel in ("schedule", "expected", "observed"):
        shade = xs(ids[f"divergence-{panel}"])
        assert abs((min(shade) + max(shade)) / 2 - x_step) < 0.5, panel
    # The events that differ are circled: the third record's call, one step early, and the
    # checkpoint that then comes before the first record's output is out of the queue.
    invoked = next(j for j, e in enumerate(observed.events) if e.event == "invoke" and e.record == 2)
    assert observed.events[invoked].step == step
    circled = {i for i in ids if i.startswith("differs-")}
    late = next(j for j, e in enumerate(expected.events) if e.event == "invoke" and e.record == 2)
    assert f"differs-observed-{invoked}" in circled and f"differs-expected-{late}" in circled
    assert len(circled) == 4


def test_the_same_counterexample_gives_the_same_bytes(counterexample, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    schedule, expected, observed, step, svg = counterexample
    again = draw_counterexample(schedule, expected, observed, step, adapter_name="CapacityOffByOne",
                                stem=tmp_path / "again", rules=("AIO-7",),
                                what="step 5: side-effect events differ (group 1 of the step)")
    assert again[0].read_bytes() == svg.read_bytes()


# --------------------------------------------------------------------------
# Every area's timeline
# --------------------------------------------------------------------------


def _biggest_example(area: str):  # type: ignore[no-untyped-def]
    candidates = [e for e in load_examples() if e.area == area and e.refusal is None and not e.rejected]
    return max(candidates, key=lambda e: (len(e.schedule.steps) + len(e.trace), e.id))


@pytest.mark.parametrize("name", sorted(areas()))
def test_every_area_draws_its_examples(name: str, tmp_path: Path) -> None:
    """Each area has a timeline; it gives every step and event of its examples a lane and a mark, and
    its biggest example draws with those lanes and marks."""
    area = get_area(name)
    timeline = area.timeline
    assert timeline is not None and timeline is not DEFAULT_TIMELINE
    examples = [e for e in load_examples() if e.area == name and e.refusal is None]
    for ex in examples:
        assert len(timeline.step_lanes(ex.schedule)) == len(ex.schedule.steps), ex.id
        assert all(isinstance(timeline.step_mark(s), Mark) for s in ex.schedule.steps)
        assert all(timeline.event_lane(ex.schedule, e) and isinstance(timeline.event_mark(e), Mark)
                   for e in ex.trace)
    assert set(timeline.step_marks) <= set(area.step_types)  # no mark for a step the area lacks
    assert set(timeline.event_marks) <= set(area.event_kinds)
    ex = _biggest_example(name)
    svg, png = draw_counterexample(ex.schedule, ex.trace, None, None, adapter_name="-", stem=tmp_path / name)
    ids = svg_ids(svg)
    assert lanes(ids, "schedule") == {slug(lane) for lane in timeline.step_lanes(ex.schedule)}
    assert lanes(ids, "expected") == {slug(timeline.event_lane(ex.schedule, e)) for e in ex.trace}
    assert not lanes(ids, "observed") and "divergence" not in ids
    assert marks(ids, "step") == Counter(timeline.step_mark(s).value for s in ex.schedule.steps)
    assert marks(ids, "expected") == Counter(timeline.event_mark(e).value for e in ex.trace)
    assert png.stat().st_size > 0


def test_an_area_without_a_timeline_is_drawn_on_default_lanes(tmp_path: Path) -> None:
    toy = replace(get_area("async_io"), name="toy_timeline", capabilities={}, timeline=None)
    register(toy)
    try:
        data = json.loads(KNOWN.read_text())
        schedule = schedule_from_dict({**data, "area": "toy_timeline"}, validate=False)
        trace = Trace(tuple(toy.event(e.step, e.event, **dict(zip(e.kind.fields, e.data)))
                            for e in expected_trace(known())))
        assert timeline_of(toy) is DEFAULT_TIMELINE
        svg, _ = draw_counterexample(schedule, trace, trace, None, adapter_name="same", stem=tmp_path / "toy")
    finally:
        unregister(toy.name)
    ids = svg_ids(svg)
    assert lanes(ids, "schedule") == {"steps"}
    assert lanes(ids, "expected") == lanes(ids, "observed") == {"output", "side-effect", "marker"}
    inputs = sum(s.role == "input" for s in schedule.steps)  # a step's mark by its role: an input
    others = len(schedule.steps) - inputs - 1
    assert marks(ids, "step") == {"record": inputs, "checkpoint": 1, "other": others}
    assert not any(i.startswith("differs-") for i in ids)


def test_lanes_are_ordered_by_word_then_number() -> None:
    assert lane_order(["split 10", "clock", "split 2", "reader 1", "split 0", "reader 0"]) == [
        "split 0", "split 2", "split 10", "clock", "reader 0", "reader 1"]
    assert lane_order(['key "b"', "key null", 'key "a"', "key group 7", "key group 12"]) == [
        'key "a"', 'key "b"', "key null", "key group 7", "key group 12"]


# --------------------------------------------------------------------------
# python -m flink_semantics.conformance draw
# --------------------------------------------------------------------------


def draw(*args: str) -> int:
    return main(["draw", *args])


def test_cli_draws_a_schedule_file_next_to_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "schedule.json"
    path.write_text(KNOWN.read_text())
    assert draw(str(path)) == 0
    out = capsys.readouterr().out.split()
    assert out == [str(tmp_path / "schedule.svg"), str(tmp_path / "schedule.png")]
    ids = svg_ids(tmp_path / "schedule.svg")
    assert lanes(ids, "expected") and not lanes(ids, "observed") and "divergence" not in ids
    assert "the reference's trace" in texts(ids["title"])


def test_cli_runs_an_adapter_and_highlights_the_divergence(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    stem = tmp_path / "out" / "picture"
    assert draw(str(KNOWN), "--adapter", WRONG, "-o", str(stem)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == [str(stem.with_suffix(".svg")), str(stem.with_suffix(".png"))]
    ids = svg_ids(stem.with_suffix(".svg"))
    assert lanes(ids, "observed") and "first divergence: step 5" in texts(ids["divergence"])
    # The reference conforms: nothing highlighted.
    assert draw(str(KNOWN), "--adapter", "reference", "-o", str(tmp_path / "ok")) == 0
    ids = svg_ids(tmp_path / "ok.svg")
    assert lanes(ids, "observed") and "divergence" not in ids and "conforms" in texts(ids["title"])


def test_cli_draws_a_saved_counterexample(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schedule = known()
    expected = expected_trace(schedule)
    _, _, observed = run_one(WRONG, schedule)
    saved = {"area": "async_io", "schedule": schedule.to_dict(), "expected": expected.to_dict()["events"],
             "observed": observed.to_dict()["events"], "adapter": "CapacityOffByOne",
             "property": "test_capacity_and_admission", "rules": ["AIO-6"], "step": 5}
    path = tmp_path / "0123abcd.json"
    path.write_text(json.dumps(saved))
    assert draw(str(path)) == 0
    ids = svg_ids(tmp_path / "0123abcd.svg")
    assert "first divergence: step 5" in texts(ids["divergence"])
    assert "CapacityOffByOne" in texts(ids["title"]) and "rules: AIO-6" in texts(ids["title"])
    # Without a step the file's traces are compared; without an observed trace only the expected is drawn.
    path.write_text(json.dumps({**saved, "step": None, "rules": []}))
    assert draw(str(path), "-o", str(tmp_path / "compared")) == 0
    assert "first divergence: step 5" in texts(svg_ids(tmp_path / "compared.svg")["divergence"])
    path.write_text(json.dumps({**saved, "observed": None, "step": None}))
    assert draw(str(path), "-o", str(tmp_path / "expected")) == 0
    ids = svg_ids(tmp_path / "expected.svg")
    assert lanes(ids, "expected") and not lanes(ids, "observed")
    capsys.readouterr()


def test_cli_reads_stdin_and_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.StringIO(KNOWN.read_text()))
    assert draw("-") == 0
    assert (tmp_path / "schedule.svg").exists() and (tmp_path / "schedule.png").exists()
    assert draw("--json", KNOWN.read_text(), "-o", "inline") == 0
    assert (tmp_path / "inline.svg").read_bytes() == (tmp_path / "schedule.svg").read_bytes()
    capsys.readouterr()


ERRORS = [
    # (file content or None for a missing file, extra arguments, exit status, what stderr says)
    (None, [], 2, "No such file"),
    ("{not json", [], 2, "not JSON"),
    ('["a list"]', [], 2, "a schedule or a saved counterexample"),
    ('{"area": "async_io", "steps": [{"op": "no_such_step"}]}', [], 2, "malformed schedule"),
    ('{"area": "no_such_area", "steps": []}', [], 2, "malformed schedule"),
    ('{"area": "async_io", "steps": [{"op": "complete", "record": 3}]}', [], 2, "SCH-3"),
    ('{"schedule": {"area": "async_io", "steps": []}, "expected": [{"step": 0, "event": "nope"}]}', [], 2,
     "malformed event"),
    ('{"schedule": {"area": "async_io", "steps": []}, "expected": [], "step": "one"}', [], 2,
     "step must be"),
    ('{"area": "async_io", "steps": []}', ["--adapter", "no_such_adapter"], 2,
     "unknown adapter 'no_such_adapter'"),
]


@pytest.mark.parametrize(("content", "extra", "status", "message"), ERRORS)
def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None,
                                 extra: list[str], status: int, message: str) -> None:
    path = tmp_path / "input.json"
    if content is not None:
        path.write_text(content)
    assert draw(str(path), *extra) == status
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], captured.err
    assert not list(tmp_path.glob("*.svg"))


def test_cli_error_in_a_fresh_process_has_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "conformance", "draw", str(tmp_path / "missing.json")],
                          cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
