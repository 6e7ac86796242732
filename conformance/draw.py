"""Draw a schedule's timeline, or a counterexample's: an SVG and a PNG, with matplotlib.

    python -m flink_semantics.conformance draw FILE [--adapter NAME] [-o STEM]

FILE is a schedule (JSON with "steps"; `-` for stdin, or --json '<schedule>') or a saved
counterexample (JSON with "schedule", "expected" and optionally "observed", "adapter", "rules",
"step", "what").  The picture shows the schedule's steps, the expected trace (the reference's, or
the file's) and, with --adapter or a saved observed trace, the observed trace beside it, the first
divergent step highlighted.  It is written to STEM.svg and STEM.png (STEM: FILE without its
suffix, ./schedule for stdin); the paths are printed.  Exit status 0 drawn, 2 unreadable or
malformed input, 3 adapter error.

The layout (area-neutral; each area's descriptor says how its steps and events are drawn, its
`Timeline`, spec/area.py): one panel for the schedule and one for each trace, stacked and sharing
the x axis, one column per step (the processing time after it under the step number when the area
has one); one lane per thing the area's runs happen on; a mark per step and per event (events of
one lane and step side by side, in trace order); events that differ between the traces circled in
red; the first divergent step shaded.  The SVG's groups carry ids, for tests and for people:

    lane-<panel>-<lane>          a lane's band (panel: schedule, expected, observed; lane slugged)
    mark-<mark>-step-<i>         step i's mark (mark: spec.area.Mark's value)
    mark-<mark>-<panel>-<j>      event j of that panel's trace (each mark's group has a <title>: its text)
    label-<mark's id>            the text under a mark, cut short (none where a column has no room)
    differs-<panel>-<j>          the red ring of an event the other trace lacks at its step
    line-<mark>-<panel>-<i>      the dotted line across a panel at a checkpoint, failure or restore step
    divergence                   the label of the first divergent step; divergence-<panel> its shading
    title, legend
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

from flink_semantics.spec.area import DEFAULT_TIMELINE, Area, Mark, Timeline, get_area
from flink_semantics.spec.schedule import Event, Schedule, ScheduleError, Step, Trace, printable, step_to_dict

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

SCHEDULE, EXPECTED, OBSERVED = "schedule", "expected", "observed"

# How each mark is drawn: marker (None: a vertical line across the lane), colour, size.
STYLE: Mapping[Mark, tuple[str | None, str, float]] = {
    Mark.RECORD: ("o", "#1f77b4", 7.0),
    Mark.CALL: (">", "#ff7f0e", 7.5),
    Mark.COMPLETION: ("<", "#2ca02c", 7.5),
    Mark.WATERMARK: (None, "#9467bd", 2.4),
    Mark.CHECKPOINT: ("s", "#e6ac00", 7.0),
    Mark.FAILURE: ("X", "#d62728", 8.5),
    Mark.RESTORE: ("^", "#17becf", 8.0),
    Mark.OUTPUT: ("D", "#3b3b3b", 6.0),
    Mark.OTHER: (".", "#8c8c8c", 8.0),
}
# Marks of steps that concern the whole job: a dotted line across every panel at that step.
JOB_MARKS = (Mark.CHECKPOINT, Mark.FAILURE, Mark.RESTORE)
DIFFERS = "#d62728"
DIVERGENCE = "#ffd54f"
LABEL_CHARS = 22  # the longest label under a mark; the full text is the mark's SVG <title>
LANE_INCHES = 0.42
SALT = "conformance-timeline"  # svg.hashsalt: the same picture gives the same bytes


@dataclass(frozen=True)
class Item:
    """One mark to draw: its lane, column (step; -1 for the configuration) and text."""

    lane: str
    step: int
    mark: Mark
    label: str  # under the mark
    title: str  # the whole text (a tooltip in the SVG)
    gid: str
    differs: bool = False


# --------------------------------------------------------------------------
# Lanes, marks and texts from the area's timeline
# --------------------------------------------------------------------------


def timeline_of(area: Area) -> Timeline:
    return area.timeline or DEFAULT_TIMELINE


def slug(text: str) -> str:
    """A lane's label in an SVG id: `key group 7` -> `key-group-7`."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "lane"


def _word_and_rest(label: str) -> tuple[str, tuple[int, int | str]]:
    """`key group 7` -> ("key group", (0, 7)); `state s1` -> ("state", (1, "s1")); `valve` -> ("valve", …)."""
    head, _, last = label.rpartition(" ")
    if head and re.fullmatch(r"-?\d+", last):
        return head, (0, int(last))
    word, _, rest = label.partition(" ")
    return word, (1, rest)


def lane_order(labels: Iterable[str]) -> list[str]:
    """Lanes in order: their words in order of first appearance, numbers by value within a word."""
    words: dict[str, int] = {}
    seen: dict[str, None] = {}
    for label in labels:
        seen.setdefault(label)
        words.setdefault(_word_and_rest(label)[0], len(words))
    return sorted(seen, key=lambda lab: (words[_word_and_rest(lab)[0]], _word_and_rest(lab)[1]))


def _short(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def step_text(step: Step, compact: bool = False) -> str:
    """`op k=v …`, or compact `op v …` (nulls left out) for the label under a step's mark."""
    d = step_to_dict(step)
    op = d.pop("op")
    if compact:
        return " ".join([op, *(printable(v) if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
                               for v in d.values() if v is not None)])
    return " ".join([op, *(f"{k}={json.dumps(v)}" for k, v in d.items())])


def event_text(area: Area, e: Event) -> str:
    """An event in the area's notation, without its step (`emit r0 1 ts=-`), else its fields."""
    try:
        text = area.notation.render_event(e)
    except Exception:  # noqa: BLE001 - a notation that cannot render an event: its plain form
        text = str(e)
    return re.sub(r"^@-?\d+\s*", "", text)


def _differences(mine: Sequence[Event], other: Sequence[Event]) -> list[bool]:
    """Per event of `mine`: whether `other` has one event fewer like it at its step (multisets)."""
    left = Counter(other)
    out = []
    for e in mine:
        out.append(left[e] <= 0)
        left[e] -= 1
    return out


def step_items(schedule: Schedule, timeline: Timeline) -> list[Item]:
    lanes = list(timeline.step_lanes(schedule))
    if len(lanes) != len(schedule.steps):
        raise ValueError(f"the timeline gives {len(lanes)} lanes for {len(schedule.steps)} steps")
    out = []
    for i, (s, lane) in enumerate(zip(schedule.steps, lanes)):
        mark = timeline.step_mark(s)
        out.append(Item(lane, i, mark, step_text(s, compact=True), f"{i}: {step_text(s)}",
                        f"mark-{mark}-step-{i}"))
    return out


def event_items(schedule: Schedule, area: Area, timeline: Timeline, trace: Trace, panel: str,
                other: Trace | None) -> list[Item]:
    differs = (_differences(trace.events, other.events) if other is not None
               else [False] * len(trace.events))
    out = []
    for j, (e, bad) in enumerate(zip(trace.events, differs)):
        mark = timeline.event_mark(e)
        text = event_text(area, e)
        out.append(Item(str(timeline.event_lane(schedule, e)), e.step, mark, text, f"@{e.step} {text}",
                        f"mark-{mark}-{panel}-{j}", bad))
    return out


# --------------------------------------------------------------------------
# The picture
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Panel:
    name: str  # SCHEDULE, EXPECTED or OBSERVED
    heading: str
    lanes: list[str]
    items: list[Item]


def _positions(items: Sequence[Item]) -> dict[str, float]:
    """x of each item: a lane's events of one step side by side inside the step's column."""
    cells: dict[tuple[str, int], list[Item]] = {}
    for it in items:
        cells.setdefault((it.lane, it.step), []).append(it)
    out = {}
    for (_, step), row in cells.items():
        span = min(0.84, 0.3 * len(row)) if len(row) > 1 else 0.0
        for k, it in enumerate(row):
            out[it.gid] = step + (span * ((k + 0.5) / len(row) - 0.5) if len(row) > 1 else 0.0)
    return out


def _draw_panel(ax: Axes, panel: Panel, x_range: tuple[float, float], column_inches: float,
                job_steps: Sequence[tuple[int, Mark]], divergent: int | None) -> None:
    n = len(panel.lanes)
    y_of = {lane: n - 1 - k for k, lane in enumerate(panel.lanes)}
    ax.set_xlim(*x_range)
    ax.set_ylim(-0.5, n - 0.5)
    for lane, y in y_of.items():
        ax.axhspan(y - 0.5, y + 0.5, color="#f3f5f8" if y % 2 else "#ffffff", lw=0, zorder=0,
                   gid=f"lane-{panel.name}-{slug(lane)}")
    ax.set_yticks(list(y_of.values()), list(y_of), fontsize=8)
    for label in ax.get_yticklabels():
        label.set_parse_math(False)
    ax.tick_params(axis="y", length=0)
    ax.set_xticks(range(int(x_range[0] + 0.5), int(x_range[1] + 0.5)))
    ax.grid(axis="x", color="#e3e6ea", lw=0.6, zorder=0.5)
    ax.set_axisbelow(True)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title(panel.heading, loc="left", fontsize=9, fontweight="bold", pad=3)
    for i, mark in job_steps:
        _, colour, _ = STYLE[mark]
        ax.axvline(i, color=colour, lw=0.9, ls=(0, (2, 2)), alpha=0.7, zorder=0.8,
                   gid=f"line-{mark}-{panel.name}-{i}")
    if divergent is not None:
        ax.axvspan(divergent - 0.5, divergent + 0.5, color=DIVERGENCE, alpha=0.35, lw=0, zorder=0.6,
                   gid=f"divergence-{panel.name}")
    xs = _positions(panel.items)
    crowd = Counter((it.lane, it.step) for it in panel.items)
    for it in panel.items:
        x, y = xs[it.gid], y_of[it.lane]
        marker, colour, size = STYLE[it.mark]
        if marker is None:
            ax.plot([x, x], [y - 0.4, y + 0.4], color=colour, lw=size, solid_capstyle="butt", zorder=3,
                    gid=it.gid)
        else:
            ax.plot([x], [y + 0.1], ls="none", marker=marker, ms=size, color=colour, mec="white", mew=0.6,
                    zorder=3, gid=it.gid)
        if it.differs:
            ax.plot([x], [y + 0.1], ls="none", marker="o", ms=13, mfc="none", mec=DIFFERS, mew=1.4, zorder=4,
                    gid=f"differs-{it.gid.split('-', 2)[2]}")
        room = int(column_inches * 20 / crowd[(it.lane, it.step)])
        if room < 8:
            continue  # no room for a label: the SVG's tooltip has the text
        line = marker is None  # a line's label goes beside it, a marker's under it
        ax.annotate(_short(it.label, min(room, LABEL_CHARS)), (x, y - 0.12 if not line else y - 0.22),
                    xytext=(3 if line else 0, 0), textcoords="offset points", fontsize=5.5,
                    ha="left" if line else "center", va="top" if not line else "center",
                    color="#b71c1c" if it.differs else "#333333", parse_math=False, zorder=3,
                    gid=f"label-{it.gid}")


def _tick_labels(first: int, n: int, times: Sequence[int] | None, column_inches: float) -> list[str]:
    """Each step's number, and under it the processing time where it moved (where it has room)."""
    out = []
    free = float("-inf")  # where the last time shown ends, in inches
    for i in range(first, n):
        if i < 0:
            out.append("config" if i == -1 else str(i))
            continue
        text = f"{times[i]} ms" if times is not None and i < len(times) else ""
        half = (4.2 * len(text) + 4) / 72 / 2
        moved = times is not None and i < len(times) and (i == 0 or times[i] != times[i - 1])
        if text and moved and i * column_inches - half >= free:
            out.append(f"{i}\n{text}")
            free = i * column_inches + half
        else:
            out.append(str(i))
    return out


def figure(schedule: Schedule, expected: Trace | None, observed: Trace | None, step: int | None, *,
           adapter_name: str | None = None, rules: Sequence[str] = (), what: str | None = None) -> Figure:
    """The timeline as a matplotlib Figure (no pyplot): the schedule, the expected trace (when given)
    and the observed one (when given), sharing the x axis; `step` highlighted."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    area = get_area(schedule.area)
    timeline = timeline_of(area)
    steps = step_items(schedule, timeline)
    panels = [Panel(SCHEDULE, f"schedule ({area.title}, {len(schedule.steps)} steps)",
                    lane_order(it.lane for it in steps) or ["(none)"], steps)]
    traces = [(EXPECTED, "expected (reference)", expected, observed),
              (OBSERVED, f"observed ({adapter_name or 'adapter'})", observed, expected)]
    event_panels = [(name, heading, event_items(schedule, area, timeline, trace, name, other))
                    for name, heading, trace, other in traces if trace is not None]
    # The events' lanes in the order the schedule's lanes give their words.
    lanes = [lane for lane in lane_order([*(it.lane for it in steps),
                                          *(it.lane for _, _, items in event_panels for it in items)])
             if any(it.lane == lane for _, _, items in event_panels for it in items)]
    panels += [Panel(name, heading + ("" if items else ": no events"), lanes or ["(none)"], items)
               for name, heading, items in event_panels]

    n = len(schedule.steps)
    all_steps = [it.step for p in panels for it in p.items] + ([step] if step is not None else [])
    first = min([0, *all_steps])  # -1: the configuration's column (a rejection)
    last = max([n - 1, *all_steps, 0])
    columns = last - first + 1
    column_inches = 0.95 if columns <= 10 else 0.8 if columns <= 14 else max(0.34, 11.2 / columns)
    label_chars = max(len(lane) for p in panels for lane in p.lanes)
    left = 0.3 + 0.065 * min(label_chars, 28)
    width = left + 0.3 + column_inches * columns
    width = max(width, 6.5)

    title = [f"{area.title}: " + (f"adapter {adapter_name!r} against the reference" if observed is not None
                                  else "the reference's trace" if expected is not None else "schedule")]
    if rules:
        title.append("rules: " + ", ".join(rules))
    if step is not None:
        what = re.sub(rf"^step {step}:\s*", "", what or "")  # the comparison's text may name the step too
        title.append(f"first divergence at {'the configuration' if step < 0 else f'step {step}'}"
                     + (f": {what}" if what else ""))
    elif what:
        title.append(what)
    wrapped = [w for line in title for w in textwrap.wrap(line, max(40, int(width * 13)))]
    title_inches = 0.22 + 0.19 * len(wrapped)
    times = list(timeline.times(schedule)) if timeline.times else None
    times = times if times and any(times) else None
    ticks_inches = 0.42 if times else 0.28
    used = [m for m in Mark if any(it.mark == m for it in steps)
            or any(it.mark == m for _, _, items in event_panels for it in items)]
    legend: list[tuple[str, Mark | None]] = [(m.value, m) for m in used]
    if any(it.differs for _, _, items in event_panels for it in items):
        legend.append(("differs", None))
    entry_inches = max([(30 + 4.2 * len(text)) / 72 for text, _ in legend] or [1.0])
    ncol = max(1, min(len(legend), int((width - left - 0.3) / entry_inches)))
    legend_rows = -(-len(legend) // ncol)
    heading_inches, legend_inches = 0.3, 0.12 + 0.19 * legend_rows
    bottom_inches = ticks_inches + (0.24 if step is not None else 0.0)
    heights = [len(p.lanes) * LANE_INCHES for p in panels]
    height = title_inches + sum(heights) + heading_inches * len(panels) + bottom_inches + legend_inches

    fig = Figure(figsize=(width, height))
    fig.text(0.01, 1 - 0.12 / height, "\n".join(wrapped), ha="left", va="top", fontsize=10,
             parse_math=False, gid="title")
    x_range = (first - 0.5, last + 0.5)
    job_steps = [(it.step, it.mark) for it in steps if it.mark in JOB_MARKS]
    top = height - title_inches
    axes = []
    for panel, h in zip(panels, heights):
        top -= heading_inches
        ax = fig.add_axes((left / width, (top - h) / height, (width - left - 0.3) / width, h / height))
        top -= h
        _draw_panel(ax, panel, x_range, column_inches, job_steps, step)
        axes.append(ax)
    for ax in axes[:-1]:
        ax.tick_params(axis="x", labelbottom=False, length=0)
    axes[-1].set_xticks(range(first, last + 1), _tick_labels(first, last + 1, times, column_inches),
                        fontsize=7)
    if step is not None:
        label = "config" if step < 0 else f"step {step}"
        axes[-1].annotate(f"first divergence: {label}", (step, 0), xycoords=("data", "axes fraction"),
                          xytext=(0, -ticks_inches * 72), textcoords="offset points", ha="center", va="top",
                          fontsize=7.5, fontweight="bold", color="#6d5600", parse_math=False,
                          gid="divergence", bbox={"boxstyle": "round,pad=0.25", "fc": DIVERGENCE, "lw": 0})
    handles = [Line2D([], [], ls="none", marker="o", ms=9, mfc="none", mec=DIFFERS, mew=1.4, label=text)
               if m is None else
               Line2D([], [], ls="-" if STYLE[m][0] is None else "none", marker=STYLE[m][0] or None,
                      color=STYLE[m][1], lw=2, ms=6, label=text) for text, m in legend]
    if handles:
        box = fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(left / width, 0.02 / height),
                         ncol=ncol, frameon=False, fontsize=7, handlelength=1.2, columnspacing=1.2,
                         borderaxespad=0.2)
        box.set_gid("legend")
    return fig


def _with_titles(svg: str, items: Iterable[Item]) -> str:
    """Each mark's whole text as the <title> of its SVG group (a tooltip in a browser)."""
    for it in items:
        opening = f'<g id="{it.gid}">'
        svg = svg.replace(opening, f"{opening}\n   <title>{escape(it.title)}</title>", 1)
    return svg


def draw_counterexample(schedule: Schedule, expected: Trace, observed: Trace | None, step: int | None, *,
                        adapter_name: str, stem: Path, rules: Sequence[str] = (),
                        what: str | None = None) -> list[Path]:
    """Draw a counterexample's timeline to `stem`.svg and `stem`.png; the paths written.

    `expected` is the reference's trace, `observed` the adapter's (None: only the expected one is
    drawn), `step` the first divergent step (None: none highlighted), `rules` the rules the report
    names, `what` what differs (one line).  The same arguments give the same SVG bytes."""
    import io

    import matplotlib

    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context({"svg.hashsalt": SALT, "svg.fonttype": "none"}):
        fig = figure(schedule, expected, observed, step, adapter_name=adapter_name, rules=rules, what=what)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
        svg, png = stem.with_suffix(".svg"), stem.with_suffix(".png")
        area = get_area(schedule.area)
        timeline = timeline_of(area)
        items = step_items(schedule, timeline)
        for name, trace, other in ((EXPECTED, expected, observed), (OBSERVED, observed, expected)):
            if trace is not None:
                items += event_items(schedule, area, timeline, trace, name, other)
        svg.write_text(_with_titles(buffer.getvalue(), items), encoding="utf-8")
        fig.savefig(png, format="png", dpi=110, metadata={"Software": None})
    return [svg, png]


# --------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------


class DrawError(ValueError):
    """Input that cannot be drawn: one line for stderr."""


EXAMPLE = """examples:
  python -m flink_semantics.conformance draw .pytest_cache/d/flink_semantics_corpus/AREA/CASE.json
  python -m flink_semantics.conformance draw schedule.json --adapter pyspark-local -o /tmp/timeline"""


def configure(parser: argparse.ArgumentParser) -> None:
    from flink_semantics.conformance.cli import add_schedule_arguments

    add_schedule_arguments(parser, adapter_required=False)
    parser.add_argument("-o", "--output", metavar="STEM",
                        help="write STEM.svg and STEM.png (default: FILE without its suffix)")


def _events(value: Any, area: str, what: str) -> Trace:
    from flink_semantics.spec.schedule import trace_from_dict

    if not isinstance(value, list):
        raise DrawError(f"{what} must be a list of events")
    try:
        return trace_from_dict({"events": value}, area)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise DrawError(f"{what}: malformed event: {e}") from None


def load(data: Any) -> tuple[Schedule, Trace | None, dict[str, Any]]:
    """A bare schedule or a saved counterexample -> (schedule, its expected trace if saved, the rest)."""
    from flink_semantics.spec.schedule import schedule_from_dict

    if not isinstance(data, dict):
        raise DrawError("expected a JSON object: a schedule or a saved counterexample")
    if "schedule" not in data:
        return schedule_from_dict(data, validate=False), None, {}
    schedule = schedule_from_dict(data["schedule"], validate=False)
    if data.get("area", schedule.area) != schedule.area:
        raise DrawError(f"the file's area {data['area']!r} is not its schedule's ({schedule.area!r})")
    expected = None if data.get("expected") is None else _events(data["expected"], schedule.area, "expected")
    rest = {k: data.get(k) for k in ("adapter", "rules", "step", "what")}
    if data.get("observed") is not None:
        rest["observed"] = _events(data["observed"], schedule.area, "observed")
    if rest["step"] is not None and (not isinstance(rest["step"], int) or isinstance(rest["step"], bool)):
        raise DrawError(f"step must be an integer or null, not {rest['step']!r}")
    if not isinstance(rest["rules"] or [], list):
        raise DrawError("rules must be a list of rule IDs")
    return schedule, expected, rest


def run(args: argparse.Namespace) -> int:
    from flink_semantics.conformance.checker import compare
    from flink_semantics.conformance.cli import check_adapter_name, read_schedule_text, run_one
    from flink_semantics.reference import expected_trace
    from flink_semantics.spec.adapter import SCRIPTED, AdapterError

    check_adapter_name(args.adapter)
    where = args.schedule if args.json is None and args.schedule not in (None, "-") else None
    try:
        text = read_schedule_text(args)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise DrawError(f"not JSON: {e}") from None
        schedule, expected, saved = load(data)
        if expected is None:
            expected = expected_trace(schedule)  # validates the schedule
        observed: Trace | None = saved.get("observed")
        adapter = saved.get("adapter")
        rules, step, what = list(saved.get("rules") or ()), saved.get("step"), saved.get("what")
        order = SCRIPTED
        if args.adapter is not None:
            adapter, order, observed = run_one(args.adapter, schedule)
            rules, step, what = [], None, None
        if observed is not None and (args.adapter is not None or step is None):
            mismatch = compare(schedule, expected, observed, order)
            if mismatch is None:
                what = what or "conforms: the same trace as the reference"
            else:
                rules, step, what = rules or list(mismatch.rules), mismatch.step, mismatch.what
        stem = Path(args.output or (Path(where).with_suffix("") if where else "schedule"))
        paths = draw_counterexample(schedule, expected, observed, step, stem=stem, rules=rules, what=what,
                                    adapter_name=str(adapter or "adapter"))
    except OSError as e:
        print(f"conformance draw: {e.strerror or e}: {e.filename or where}", file=sys.stderr)
        return 2
    except ScheduleError as e:
        print(f"malformed schedule: {e}", file=sys.stderr)
        return 2
    except DrawError as e:
        print(f"conformance draw: {e}", file=sys.stderr)
        return 2
    except AdapterError as e:
        print(f"conformance draw: adapter {args.adapter!r}: {e}", file=sys.stderr)
        return 3
    if what:
        print(what)
    for p in paths:
        print(p)
    return 0
