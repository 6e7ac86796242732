"""The pytest plugin of the conformance suite.

Options:
  --adapter NAME                  the adapter under test: a built-in name (conformance/registry.py)
                                  module:factory, or process:<command line> (an engine speaking
                                  docs/process-protocol.md); default $CONFORMANCE_ADAPTER.  A session that
                                  collects the suite's tests without one is a usage error.
  --areas A,B                     run only these areas (default: every area)
  --conformance-report PATH       write the per-rule verdicts as JSON (conformance/verdicts.py)
  --expected-failures PATH        a JSON object rule ID -> reason (default: the adapter's own
                                  `expected_failures`, a mapping or a path)
  --strict                        pytest's own strict mode; here it also fails the run on failing
                                  SHOULD and MAY rules, expected failures and stale ones
  --conformance-deadline SECONDS  how long one run_batch may take before the adapter is reported as
                                  hung; default $CONFORMANCE_DEADLINE or 900
  --conformance-shrink yes|no     shrink failing examples (default: yes, unless the adapter says no)
  --conformance-keep-going        an adapter whose run_batch raises or returns something that is not
                                  one trace per schedule fails the property and the run goes on
                                  (default: the run stops at once, exit code 3)
  --conformance-profile NAME      "default" or "thorough" (also $CONFORMANCE_PROFILE): the suite's
                                  hypothesis settings, applied to its own properties only
  --corpus DIR                    replay the counterexamples in DIR and save new ones there (default:
                                  replay the shipped corpus, save to pytest's cache directory)

The plugin is inert in a session that runs none of the suite's tests: it registers no hypothesis
profile, loads none, and writes nothing.

At the end of a run, a table gives every rule of the areas run its verdict (conformance/verdicts.py).

Markers:
  @pytest.mark.rule("XY-12", ...)    the spec rules a property checks (an unknown ID is a collection error)
  @pytest.mark.rule("XY-13", needs=["scripted", ...])
                                     rules the property checks only when the adapter has these needs
                                     (else they are UNSUPPORTED for it, with the reason, and the
                                     property runs for its other rules; with none left, it is
                                     UNSUPPORTED)
  @pytest.mark.area("name")          the area a property belongs to; the adapter must declare it
  @pytest.mark.needs("name.feature", "scripted", ...)
                                     the adapter capabilities a property needs; "scripted" means the
                                     adapter must follow the schedule's completion order.  A property
                                     whose needs the adapter lacks is reported as UNSUPPORTED.

Fixture `conformance` (session scope): the adapter under test and `check(batch)`.  While a property
generates its examples, `check` gathers the batches into jobs of the adapter's `batch_size` that run
in the background; a difference found there is reproduced by replaying the property, so that
hypothesis shrinks it (`pytest_runtest_call`).  The summary gives the schedules per property, the
throughput, and a verdict per rule (conformance/verdicts.py).
"""

from __future__ import annotations

import json
import os
import random
import shlex
import sys
import threading
import time
import traceback
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.conformance import corpus
from flink_semantics.conformance import verdicts as V
from flink_semantics.conformance.checker import compare, format_report, not_one_trace_each, reproducer
from flink_semantics.conformance.coverage import Tally
from flink_semantics.conformance.isolate import isolate
from flink_semantics.conformance.progress import Progress, duration
from flink_semantics.conformance.registry import BUILTIN, adapter_attribute, budget_hints, load_adapter
from flink_semantics.reference import expected_trace
from flink_semantics.spec.adapter import (
    DEFAULT_BATCH_SIZE,
    FREE,
    SCRIPTED,
    Adapter,
    AdapterError,
    completion_order,
    completion_orders,
    unsupported,
)
from flink_semantics.spec.area import all_capabilities, areas
from flink_semantics.spec.rules import load_rules
from flink_semantics.spec.schedule import Schedule, Trace
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import seed as hypothesis_seed

# --------------------------------------------------------------------------
# The suite's hypothesis settings
# --------------------------------------------------------------------------
# They apply to the suite's own properties only (`apply_settings`): no hypothesis profile is
# registered or loaded, so the settings of every other test in the session stay as they were.

_COMMON: dict[str, Any] = dict(
    deadline=None, print_blob=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
# Batches average 3 to 5 schedules, so 100 examples give over 200 schedules per property.
PROFILES: dict[str, dict[str, Any]] = {
    "default": dict(max_examples=100, derandomize=True, **_COMMON),
    "thorough": dict(max_examples=1000, derandomize=False, **_COMMON),
}


def suite_settings(profile: str, examples: int | None, shrink: bool) -> settings:
    """The settings of the suite's properties: the profile's, sized by the adapter's own budget
    (`examples`, spec/adapter.py) and without shrinking when it asks for none; built on
    hypothesis' own defaults, not on whatever profile the session loaded."""
    hints = dict(PROFILES[profile])
    if examples is not None:
        hints["max_examples"] = examples * (10 if profile == "thorough" else 1)
    if not shrink:
        hints["phases"] = [p for p in Phase if p not in (Phase.shrink, Phase.explain)]
    return settings(settings.get_profile("default"), **hints)

UNSUPPORTED = "UNSUPPORTED"


def blame(concerned: Sequence[str], checked: Sequence[str]) -> list[str]:
    """The rules a failure is blamed on: those the divergence concerns that the property checks;
    failing that, those the divergence concerns; failing that, those the property checks."""
    return [r for r in concerned if r in checked] or list(concerned) or list(checked)


def on_expected_failures(blamed: Sequence[str], expected_failures: Mapping[str, str], strict: bool) -> bool:
    """A divergence on the adapter's expected failures only (and not --strict): known, not new."""
    return not strict and bool(blamed) and all(r in expected_failures for r in blamed)


class ConformanceFailure(AssertionError):
    """An adapter's trace differs from the reference trace; the message is the full report.

    `rules`: the rules the divergence concerns (the report names them); `reproducer`: one line;
    `schedule`, `expected`, `observed`, `step`: the counterexample (the failing schedule, both traces
    and the first divergent step), when the failure is a divergence; `possible`: rules it may
    concern too that the evidence cannot single out (their verdict is inconclusive)."""

    def __init__(self, message: str, rules: Sequence[str] = (), reproducer: str | None = None, *,
                 schedule: Schedule | None = None, expected: Trace | None = None,
                 observed: Trace | None = None, step: int | None = None, what: str | None = None,
                 possible: Sequence[str] = ()):
        super().__init__(message)
        self.rules = list(rules)
        self.possible = [r for r in possible if r not in self.rules]  # inconclusive, not failed
        self.reproducer = reproducer
        self.schedule, self.expected, self.observed, self.step = schedule, expected, observed, step
        self.what = what  # one line: what differs


class _Found(BaseException):
    """Raised from a property's example once its gathered jobs met a difference: drawing the rest of
    its examples would be wasted (the replay that follows meets the difference again and shrinks
    it).  A BaseException, not an Exception: hypothesis lets it through as it lets KeyboardInterrupt,
    without taking it for the property's failure or shrinking it."""


@dataclass
class _Job:
    """One run_batch in a worker thread."""

    schedules: list[Schedule]
    started: float
    worker: threading.Thread | None = None
    box: dict[str, Any] = field(default_factory=dict)


class _Gathering:
    """The batches of one property's generation, run by the adapter in jobs of at most `size`.

    At most `concurrency` jobs run at a time (the adapter's `concurrent_jobs`, default 1: adapters
    need not be thread-safe).  A job starts as soon as a slot is free and a quarter of `size` is
    gathered, with everything gathered meanwhile: so the adapter works while the property draws,
    and jobs grow until it keeps up.  Finished jobs are checked as the property calls `add`; once
    one met a difference (or an error) the property draws no more examples (`_Found`); `finish`
    runs and checks the rest, and returns the first difference, which the plugin then reproduces by
    replaying the property.
    """

    def __init__(self, conformance: Conformance, size: int, concurrency: int = 1):
        self.conformance = conformance
        self.size = size
        self.concurrency = concurrency
        self.pending: list[Schedule] = []
        self.queued: set[Schedule] = set()  # pending, or in a running job
        self.jobs: list[_Job] = []  # running, oldest first
        self.found: BaseException | None = None

    def add(self, schedules: Sequence[Schedule]) -> None:
        self._collect(wait=False)
        if self.found is None:
            for s in schedules:  # each distinct schedule runs once
                if s not in self.conformance.known and s not in self.queued:
                    self.pending.append(s)
                    self.queued.add(s)
            if len(self.pending) >= max(1, self.size // 4):  # a job is worth its fixed cost
                self._launch()

    def _launch(self) -> None:
        if len(self.jobs) < self.concurrency and self.pending:
            self.jobs.append(self.conformance._start(self.pending[:self.size]))
            self.pending = self.pending[self.size:]

    def _collect(self, wait: bool) -> None:
        """Check the jobs that are done (with `wait`, wait for the oldest first)."""
        for job in list(self.jobs):
            if not (wait and job is self.jobs[0]) and job.worker is not None and job.worker.is_alive():
                continue
            self.jobs.remove(job)
            self.queued.difference_update(job.schedules)
            try:  # a difference, or a bug of the adapter: found, and reproduced later by the replay
                traces = self.conformance._finish(job)
                self.conformance.known.update(zip(job.schedules, traces))  # the replay reuses them all
                for schedule, trace in zip(job.schedules, traces):
                    if self.found is None:
                        self.conformance.verify(schedule, trace)
            except Exception as e:
                self.found = self.found or e
        if self.found is None and len(self.pending) >= max(1, self.size // 4):
            self._launch()

    def finish(self) -> BaseException | None:
        while self.jobs or (self.pending and self.found is None):
            if self.found is None:
                self._launch()
            self._collect(wait=True)
        return self.found


# --------------------------------------------------------------------------
# The session object behind the `conformance` fixture
# --------------------------------------------------------------------------


class Conformance:
    """The adapter under test and the checks run against it."""

    def __init__(self, adapter: Adapter, spec: str, deadline: float, batch_size: int = DEFAULT_BATCH_SIZE,
                 keep_going: bool = False):
        self.adapter = adapter
        self.spec = spec
        self.deadline = deadline
        self.keep_going = keep_going  # a broken run_batch fails the property instead of the run
        self.fatal_detail = ""  # the traceback of a run_batch that raised (printed before `fatal`)
        self.item: pytest.Item | None = None
        self.counts: Counter[str] = Counter()  # schedules checked, per property
        self.through_adapter: Counter[str] = Counter()  # of them, run through the adapter
        self.checked_elsewhere: Counter[str] = Counter()  # of them, the adapter's traces of a fixture
        self.fatal = ""  # why the session ended: run_batch hung, or the adapter cannot run
        self.batch_size = batch_size  # schedules per run_batch the adapter prefers (spec/adapter.py)
        self.gathering: _Gathering | None = None  # while a property generates its examples
        self.known: dict[Schedule, Trace] = {}  # the adapter's traces of the current property
        self.found_after: dict[str, int] = {}  # per property: schedules checked when a first one failed
        self.tally = Tally()  # the current property's distinct schedules and the states they reach
        self.examples = 0  # the current property's examples so far (for the progress line)
        self.validated: Counter[str] = Counter()  # schedules checked per area, the whole session
        # per property: traces compared with the reference, those that differ, and the events lost
        # and duplicated in them (the fault runs' tally: all but the first must stay 0)
        self.differences: dict[str, Counter[str]] = defaultdict(Counter)
        self.on_example: Callable[[], None] | None = None  # called after each example (progress)
        # called every `wait_slice` seconds while a run_batch runs, with its size and the time so far
        # (progress: a streaming fault run's batch can take half an hour)
        self.on_wait: Callable[[int, float], None] | None = None
        self.wait_slice = 60.0
        self._probe_hung = False  # a run_batch hung while isolating a breaking schedule
        # The adapter's expected failures (set by the plugin) and, per property, the first
        # divergence on them only: recorded, and the property searches on for its other rules.
        self.expected_failures: Mapping[str, str] = {}
        self.strict = False
        self.known_divergences: dict[str, dict[str, Any]] = {}

    @property
    def name(self) -> str:
        return str(self.adapter.name)

    def completion_order(self, area: str) -> str:
        """SCRIPTED or FREE: how the adapter completes calls in this area (spec/adapter.py)."""
        return completion_order(self.adapter, area)

    def capabilities(self) -> dict[str, str | None]:
        return dict(self.adapter.capabilities())

    def missing(self, needs: Sequence[str], areas: Sequence[str]) -> list[tuple[str, str]]:
        """The needed capabilities the adapter lacks, with its reasons; "scripted" in `areas`."""
        caps = self.capabilities()
        out = []
        for need in needs:
            if need == "scripted":
                for area in areas:
                    if (order := self.completion_order(area)) != SCRIPTED:
                        out.append((need, f"the adapter completes {area} calls in its own order ({order})"))
            elif (reason := unsupported(caps, need)) is not None:
                out.append((need, reason))
        return out

    def restrict(self, features: Any) -> Any:
        """An area's features without what the adapter cannot run (`features.restrict(caps, order)`);
        the area is the one whose module (conformance/areas/<area>.py, its AREA) defines them."""
        area = sys.modules[type(features).__module__].AREA
        return features.restrict(self.capabilities(), self.completion_order(area))

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        """adapter.run_batch in a worker thread; a run longer than the deadline stops the session."""
        return self._finish(self._start(schedules))

    def _start(self, schedules: Sequence[Schedule]) -> _Job:
        if self.fatal:  # the adapter is stuck in an earlier batch: do not wait again
            pytest.exit(self.fatal, returncode=3)
        job = _Job(list(schedules), time.monotonic())

        def work() -> None:
            try:
                job.box["traces"] = self.adapter.run_batch(job.schedules)
            except BaseException as e:  # noqa: B036 - handed to the test thread
                job.box["raised"] = e

        job.worker = threading.Thread(target=work, name=f"conformance-{self.name}", daemon=True)
        job.worker.start()
        return job

    def _finish(self, job: _Job) -> list[Trace]:
        """Wait for a run_batch; a hang or an AdapterError ends the session, other errors are raised."""
        assert job.worker is not None
        while job.worker.is_alive() and (left := self.deadline - (time.monotonic() - job.started)) > 0:
            job.worker.join(min(left, self.wait_slice) if self.on_wait is not None else left)
            if job.worker.is_alive() and self.on_wait is not None:
                self.on_wait(len(job.schedules), time.monotonic() - job.started)
        if job.worker.is_alive():
            self.fatal = (f"conformance: adapter {self.name!r} hung: run_batch of {len(job.schedules)} "
                          f"schedule(s) did not return within {self.deadline:g} s (--conformance-deadline)")
            pytest.exit(self.fatal, returncode=3)
        raised = job.box.get("raised")
        if isinstance(raised, AdapterError):
            # The adapter cannot run at all (for example its engine did not start): a verdict on
            # every property would be noise, so the session ends with one line.
            first = (str(raised).strip().splitlines() or [type(raised).__name__])[0]
            self.fatal = f"conformance: adapter {self.name!r} failed: {first}"
            pytest.exit(self.fatal, returncode=3)  # pytest_unconfigure prints it on stderr
        traces = job.box.get("traces")
        if raised is not None:
            if not self.keep_going:
                self._broken(job, f"run_batch raised {type(raised).__name__}: {raised}", raised)
            raise raised
        what = not_one_trace_each(traces, len(job.schedules))
        if what is not None:
            if not self.keep_going:
                self._broken(job, what, None)
            raise ConformanceFailure(f"adapter {self.name!r}: {what}")
        if self.item is not None:
            self.counts[self.item.nodeid] += len(job.schedules)
            self.through_adapter[self.item.nodeid] += len(job.schedules)
        return list(traces or ())  # (one Trace each: checked above)

    def _broken(self, job: _Job, what: str, raised: BaseException | None) -> None:
        """End the session: the adapter cannot run schedules at all (--conformance-keep-going: go on).

        Before it ends, the schedule that breaks run_batch alone is isolated and shrunk
        (conformance/isolate.py), and the last line printed is its reproducer, as it runs."""
        first = (what.strip().splitlines() or [what])[0]
        found = isolate(job.schedules, first, self._probe)
        lines = [f"conformance: adapter {self.name!r} is broken: {found.error} (a batch of "
                 f"{len(job.schedules)}; {found.describe()}, {found.probes} run_batch call(s) to find it); "
                 "the run stops (--conformance-keep-going runs on)"]
        if found.single is not None:
            lines.append("reproduce: " + reproducer(found.single, self.spec))
        self.fatal = "\n".join(lines)
        if raised is not None:
            self.fatal_detail = "".join(traceback.format_exception(raised))
        pytest.exit(self.fatal, returncode=3)

    def _probe(self, schedules: Sequence[Schedule]) -> str | None:
        """One run_batch while isolating a breaking schedule: its error in one line, or None when it
        ran them (or hung: then the isolation is over, and what it found so far is reported)."""
        if self._probe_hung:
            return None
        job = self._start(schedules)
        assert job.worker is not None
        job.worker.join(self.deadline)
        if job.worker.is_alive():
            self._probe_hung = True
            return None
        raised, traces = job.box.get("raised"), job.box.get("traces")
        if raised is not None:
            first = (str(raised).strip().splitlines() or [""])[0]
            return f"run_batch raised {type(raised).__name__}: {first}"
        return not_one_trace_each(traces, len(schedules))

    def property_rules(self) -> list[str]:
        """The rules the current property checks against this adapter (those it has the needs for)."""
        if self.item is None:
            return []
        props: dict[str, Any] = dict(self.item.user_properties)
        return list(props.get("conformance_rules", item_rules(self.item)))

    def verify(self, schedule: Schedule, observed: Trace) -> None:
        """Compare one trace with the reference; ConformanceFailure (the full report) if it differs."""
        want = expected_trace(schedule)
        self.validated[str(schedule.area)] += 1
        mismatch = compare(schedule, want, observed, self.completion_order(schedule.area))
        if mismatch is not None and mismatch.reference is not None:
            want = mismatch.reference  # the reference under the choice the trace shows (legal_reference)
        self._tally_difference(want, observed, mismatch is not None)
        if mismatch is not None:
            blamed = blame(mismatch.rules, self.property_rules())
            if self.item is not None and on_expected_failures(blamed, self.expected_failures, self.strict):
                # The adapter lists these rules as expected failures: the first such divergence is
                # recorded (its verdict), and the property's search goes on for its other rules.
                nodeid = self.item.nodeid
                self.known_divergences.setdefault(nodeid, {
                    "blamed": blamed, "reproducer": reproducer(schedule, self.spec),
                    "counterexample_steps": len(schedule.steps), "found_after": self.counts[nodeid]})
                return
            if self.item is not None:
                self.found_after.setdefault(self.item.nodeid, self.counts[self.item.nodeid])
            raise ConformanceFailure(format_report(
                schedule, mismatch, adapter_name=self.name, adapter_spec=self.spec,
                expected=want, observed=observed, property_rules=self.property_rules()),
                blamed, reproducer(schedule, self.spec),
                schedule=schedule, expected=want, observed=observed, step=mismatch.step, what=mismatch.what,
                possible=[r for r in mismatch.possible if r in self.property_rules()])

    def _tally_difference(self, want: Trace, observed: Trace, differs: bool) -> None:
        """Count a comparison; for a trace the checker rejects, the events the reference has that
        the adapter's trace lacks (lost) and those it has more often (duplicated or extra)."""
        if self.item is None:
            return  # outside a property: its counts would be reported under no area
        tally = self.differences[self.item.nodeid]
        tally["compared"] += 1
        if differs:
            want_events, got_events = Counter(want.events), Counter(observed.events)
            tally["different"] += 1
            tally["lost"] += sum((want_events - got_events).values())
            tally["duplicated"] += sum((got_events - want_events).values())

    def check(self, schedules: Sequence[Schedule]) -> None:
        """Check a batch: every trace of the adapter compared with the reference.

        While a property generates its examples, the batches are gathered (`gather`): the adapter
        runs them in large jobs in the background while the next examples are drawn, and the traces
        are checked as the jobs finish.  Otherwise (and when a property is replayed after a
        failure, so that hypothesis shrinks it) the batch runs at once, and a difference raises
        ConformanceFailure; traces already known for the property are not run again.
        """
        if self.gathering is not None:  # generation (not a replay for shrinking): count and gather
            own = item_areas(self.item) if self.item is not None else []
            for schedule in schedules:
                if schedule.area in own:  # coverage of the property's own area (conformance/coverage.py)
                    for reached in self.tally.add(schedule):
                        event(f"reached: {reached}")
            self.examples += 1
            if self.on_example is not None:
                self.on_example()
            self.gathering.add(schedules)
            if self.gathering.found is not None:
                raise _Found()  # stop drawing: the replay meets the difference (pytest_runtest_call)
            return
        missing = [s for s in dict.fromkeys(schedules) if s not in self.known]
        if missing:
            self.known.update(zip(missing, self.run_batch(missing)))
        for schedule in schedules:
            self.verify(schedule, self.known[schedule])

    def count(self, n: int, adapter: bool = False) -> None:
        """Count schedules a property checked itself: without the adapter (the suite's own checks
        of malformed schedules), or with `adapter` traces it got from a batch run outside the
        property (spec examples, corpus cases)."""
        if self.item is not None:
            self.counts[self.item.nodeid] += n
            if adapter:
                self.checked_elsewhere[self.item.nodeid] += n

    def shown_by_adapter(self, nodeid: str) -> bool:
        """Whether a property's verdict says something of the adapter: False when it checked
        schedules, none of them through the adapter (its rules get the verdict `suite only`)."""
        return not (self.counts[nodeid] > 0 and self.through_adapter[nodeid] == 0
                    and self.checked_elsewhere[nodeid] == 0)


# --------------------------------------------------------------------------
# Hooks
# --------------------------------------------------------------------------

_KEY = pytest.StashKey["_State"]()


class _State:
    def __init__(self, spec: str | None, deadline: float):
        self.spec = spec
        self.deadline = deadline
        self.conformance: Conformance | None = None
        self.results: dict[str, V.ItemResult] = {}  # nodeid -> what it showed (verdicts.py)
        self.batch_size = DEFAULT_BATCH_SIZE  # the adapter's budget hint, read before it is built
        self.areas: list[str] = []
        self.strict = False
        self.expected_failures: dict[str, str] = {}
        self.report_path: str | None = None
        self.seconds = 0.0  # wall time of the properties that ran schedules through the adapter
        self.through_adapter = 0  # schedules they ran
        self.per_area: dict[str, list[float]] = {}  # area -> [schedules, seconds] (single-area properties)
        self.differences: dict[str, Counter[str]] = defaultdict(Counter)  # area -> Conformance.differences
        self.startup = 0.0  # the adapter's prepare()
        self.corpus: Path | None = None  # the counterexamples replayed (conformance/corpus.py)
        self.corpus_option: str | None = None  # --corpus
        self.settings = suite_settings("default", None, True)  # the suite's properties' hypothesis settings
        self.tally = Tally()  # generator coverage of the whole run (conformance/coverage.py)
        self.deselected_areas: set[str] = set()  # areas some of whose properties were deselected
        self.floors_left: set[str] = set()  # areas whose coverage floors xdist workers left to the controller
        self.floors_short: dict[str, list[str]] = {}  # area -> its states below their floors
        self.progress: Progress | None = None  # the progress line (thorough, --conformance-progress)
        self.items_done = 0  # of `properties`
        self.properties: set[str] = set()  # the hypothesis properties of the run (for the progress line)
        self.profile = "default"  # the suite's profile (PROFILES), "/adapter" when it sizes its budget
        self.run: dict[str, Any] = {}  # the header's facts, for the JSON report
        self.seed = ""  # the run's seed, when the profile is not derandomized (--hypothesis-seed)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect counts, UNSUPPORTED properties and each property's result from reports (works
        under xdist too: everything comes from the report's user_properties)."""
        props: dict[str, Any] = dict(report.user_properties)
        if "conformance_floors_left" in props and report.when == "call":
            self.floors_left.add(props["conformance_floors_left"])
        if "conformance_rules" not in props:
            return
        if report.when == "teardown" and report.nodeid in self.properties:
            self.items_done += 1
        if "conformance_coverage" in props and report.when == "call":
            self.tally.merge(props["conformance_coverage"])
        if props.get("conformance_differences") and report.when == "call":
            area = (props.get("conformance_areas") or ["(several)"])[0]  # several: under the first
            self.differences[area].update(props["conformance_differences"])
        rules = list(props["conformance_rules"])
        if props.get("conformance_adapter_schedules") and report.when == "call":
            self.seconds += report.duration
            self.through_adapter += int(props["conformance_adapter_schedules"])
            own = props.get("conformance_areas", [])
            if len(own) == 1:
                tally = self.per_area.setdefault(own[0], [0, 0.0])
                tally[0] += int(props["conformance_adapter_schedules"])
                tally[1] += report.duration
        result = None
        if report.skipped and report.when == "setup" and isinstance(report.longrepr, tuple):
            message = str(report.longrepr[2])
            if UNSUPPORTED in message:
                reason = message.split(f"{UNSUPPORTED} ", 1)[-1]
                result = V.ItemResult(report.nodeid, rules, V.UNSUPPORTED, reason=reason,
                                      replay=bool(props.get("conformance_replay")))
        elif report.when == "call" or report.failed:
            failure = props.get("conformance_failure") or {}
            outcome = V.FAILED if report.failed else V.XFAIL if failure else V.PASSED
            result = V.ItemResult(report.nodeid, rules, outcome, int(props.get("conformance_schedules", 0)),
                                  list(failure.get("blamed", rules if report.failed else [])),
                                  failure.get("reproducer"), found_after=props.get("conformance_found_after"),
                                  possible=list(failure.get("possible") or []),
                                  counterexample_steps=failure.get("counterexample_steps"),
                                  replay=bool(props.get("conformance_replay")),
                                  adapter=bool(props.get("conformance_adapter", True)))
        known = props.get("conformance_known") if report.when == "call" else None
        if known and result is not None:
            # Two results: the property's rules but the known ones, passed on all its schedules,
            # and the expected failure on the rules it diverged on.
            blamed = list(known["blamed"])
            result.rules = [r for r in rules if r not in blamed]
            self.results[f"{report.nodeid} [expected failure]"] = V.ItemResult(
                report.nodeid, blamed, V.XFAIL, result.schedules, blamed, known.get("reproducer"),
                found_after=known.get("found_after"), counterexample_steps=known.get("counterexample_steps"),
                adapter=result.adapter)
        if result is not None and (result.outcome != V.PASSED or report.nodeid not in self.results):
            self.results[report.nodeid] = result
        if report.when == "call":  # rules the property names but cannot show with this adapter
            for rule, why in dict(props.get("conformance_rules_lacking") or {}).items():
                self.results[f"{report.nodeid} [{rule}]"] = V.ItemResult(report.nodeid, [rule], V.UNSUPPORTED,
                                                                         reason=why)

    def ran(self) -> list[V.ItemResult]:
        return [r for r in self.results.values() if r.outcome != V.UNSUPPORTED]

    def unsupported(self) -> list[V.ItemResult]:
        return [r for r in self.results.values() if r.outcome == V.UNSUPPORTED]

    def verdicts(self) -> list[V.Verdict]:
        return V.verdicts(load_rules(), self.results.values(), self.areas, self.expected_failures)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "Flink semantics conformance suite")
    group.addoption("--adapter", default=None, metavar="NAME",
                    help=f"adapter under test: {', '.join(sorted(BUILTIN))}, module:factory, or "
                         "'process:<command line>' (default: $CONFORMANCE_ADAPTER; required to run "
                         "the suite)")
    group.addoption("--conformance-profile", default=None, choices=tuple(PROFILES),
                    help="the suite's hypothesis settings: default (derandomized, 100 examples a "
                         "property) or thorough (random seeds, 1000); default $CONFORMANCE_PROFILE or "
                         "default. They apply to the suite's properties only")
    group.addoption("--areas", default=None, metavar="A,B",
                    help=f"run only these areas ({', '.join(areas())}; default: all)")
    group.addoption("--conformance-report", default=None, metavar="PATH",
                    help="write the per-rule verdicts as JSON to PATH (docs/running-the-suite.md, "
                         "'The report')")
    group.addoption("--expected-failures", default=None, metavar="PATH",
                    help="a JSON object rule ID -> reason: rules expected to fail "
                         "(default: the adapter's own `expected_failures`)")
    group.addoption("--corpus", default=None, metavar="DIR",
                    help="the corpus of counterexamples: replayed first, and where new ones are saved "
                         "with their timelines (default: $CONFORMANCE_CORPUS, else the shipped corpus is "
                         "replayed and new ones go to pytest's cache directory; 'none': neither)")
    group.addoption("--conformance-progress", action="store_true", default=False,
                    help="print a progress line every 10 s: properties done, schedules validated per "
                         "area, ETA (on by itself with the thorough profile)")
    group.addoption("--conformance-shrink", choices=("yes", "no"), default=None,
                    help="shrink failing examples (default: yes, unless the adapter sets `shrink = False`)")
    group.addoption("--conformance-keep-going", action="store_true", default=False,
                    help="when the adapter's run_batch raises or returns something that is not one trace "
                         "per schedule, fail the property and go on (default: stop the run, exit code 3)")
    group.addoption("--conformance-deadline", type=float, default=None, metavar="SECONDS",
                    help="report the adapter as hung when one run_batch takes longer "
                         "(default: $CONFORMANCE_DEADLINE or 900)")


def item_rules(item: pytest.Item) -> list[str]:
    """Every rule the property's `rule` markers name."""
    return [r for m in item.iter_markers("rule") for r in m.args]


def lacking_rules(item: pytest.Item, conformance: Conformance) -> dict[str, str]:
    """Rule -> why the adapter cannot show it, for the rules of a `rule` marker with `needs`
    (`@pytest.mark.rule("XY-13", needs=["scripted"])`: the property checks XY-13 only with a
    SCRIPTED adapter, for instance when a FREE one is drawn no schedule that could break it)."""
    out: dict[str, str] = {}
    for m in item.iter_markers("rule"):
        missing = conformance.missing(list(m.kwargs.get("needs", ())), item_areas(item))
        for r in m.args if missing else ():
            out[r] = "; ".join(f"{cap}: {reason}" for cap, reason in missing)
    return out


def item_areas(item: pytest.Item) -> list[str]:
    """The areas a conformance test belongs to (`area` markers); the adapter must declare each."""
    return [a for m in item.iter_markers("area") for a in m.args]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rule(*ids): the spec rule IDs a conformance property checks")
    config.addinivalue_line("markers", "needs(*capabilities): adapter capabilities a property needs")
    config.addinivalue_line("markers", "area(name): the area a conformance property belongs to")
    config.addinivalue_line("markers", "corpus: replays saved counterexamples; runs before the properties")
    config.addinivalue_line("markers", "coverage_floor: checks generator coverage; runs after the properties")
    spec = config.getoption("adapter") or os.environ.get("CONFORMANCE_ADAPTER") or None
    deadline = config.getoption("conformance_deadline") or float(os.environ.get("CONFORMANCE_DEADLINE", 900))
    config.stash[_KEY] = _State(spec, deadline)
    config.pluginmanager.register(config.stash[_KEY], "conformance-state")
    state = config.stash[_KEY]
    state.areas = selected_areas(config)
    state.strict = strict_mode(config)
    state.report_path = config.getoption("conformance_report")
    state.corpus = corpus.directory(config.getoption("corpus"))
    state.corpus_option = config.getoption("corpus")
    profile = config.getoption("conformance_profile") or os.environ.get("CONFORMANCE_PROFILE", "default")
    if profile not in PROFILES:
        raise pytest.UsageError(f"conformance profile {profile!r} (--conformance-profile or "
                                f"$CONFORMANCE_PROFILE): use one of {', '.join(PROFILES)}")
    state.profile = profile
    given = config.getoption("hypothesis_seed", None)
    state.seed = str(given) if given is not None else str(random.getrandbits(32))
    if spec is not None:
        configure_adapter(config, state, spec)


def configure_adapter(config: pytest.Config, state: _State, spec: str) -> None:
    """What the adapter's factory declares before it is built: its budget (batch size, examples,
    shrinking) and its expected failures; the suite's settings from them."""
    state.batch_size, examples = budget_hints(spec)
    try:
        source = config.getoption("expected_failures") or adapter_attribute(spec, "expected_failures")
        state.expected_failures = V.load_expected_failures(source, load_rules())
    except V.ExpectedFailuresError as e:
        raise pytest.UsageError(f"expected failures: {e}") from None
    shrink = adapter_attribute(spec, "shrink") is not False
    if config.getoption("conformance_shrink"):  # the option overrides the adapter's attribute
        shrink = config.getoption("conformance_shrink") == "yes"
    profile = state.profile.split("/", 1)[0]  # (this runs again once the adapter is built)
    state.settings = suite_settings(profile, examples, shrink)
    if examples is not None or not shrink:  # the adapter sizes its own budget (spec/adapter.py)
        state.profile = f"{profile}/{spec}"


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> Any:
    """An unknown rule ID in a `rule` marker, or an unknown capability in its `needs` or in a `needs`
    marker, is a collection error (a misspelt need would leave its rules unsupported for every adapter)."""
    result = yield
    own = list(getattr(obj, "pytestmark", []))
    for item in result if isinstance(result, list) else []:  # parametrized cases with their own marks
        own += list(getattr(item, "own_markers", []))
    marks = [m for m in own if getattr(m, "name", None) == "rule"]
    needs = [c for m in own if getattr(m, "name", None) == "needs" for c in m.args]
    needs += [c for m in marks for c in m.kwargs.get("needs", ())]
    bad = [c for c in dict.fromkeys(needs) if c != "scripted" and c not in all_capabilities()]
    if bad:
        raise collector.CollectError(f"{name}: `needs` names unknown capabilities {', '.join(map(str, bad))} "
                                     "(an area's CAPABILITIES in spec/areas/, or \"scripted\")")
    if marks:
        known = load_rules()
        unknown = [r for m in marks for r in m.args if r not in known]
        if unknown:
            raise collector.CollectError(
                f"{name}: @pytest.mark.rule names unknown rule ID(s) {', '.join(map(str, unknown))} "
                f"(rules are defined in spec/*.md)")
        if not all(m.args for m in marks):
            raise collector.CollectError(f"{name}: @pytest.mark.rule needs at least one rule ID")
    return result


def strict_mode(config: pytest.Config) -> bool:
    """pytest's own `--strict` (or the `strict` ini option) also makes conformance strict: failing
    SHOULD and MAY rules, expected failures and stale ones fail the run."""
    try:
        return bool(config.getoption("strict", False) or config.getini("strict"))
    except (ValueError, KeyError):
        return bool(config.getoption("strict", False))


def selected_areas(config: pytest.Config) -> list[str]:
    """The areas to run: --areas, or every area."""
    known = list(areas())
    option = config.getoption("areas", None)
    if not option:
        return known
    chosen = [a.strip() for a in option.split(",") if a.strip()]
    unknown = [a for a in chosen if a not in known]
    if unknown:
        raise pytest.UsageError(f"--areas: unknown area(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return chosen


SUITE = Path(__file__).resolve().parent  # the suite's own tests (conformance/test_*.py)


def is_suite_item(item: pytest.Item) -> bool:
    """A test of the suite itself (not one of the session's other tests)."""
    return bool(item_areas(item)) or Path(str(item.path)).resolve().parent == SUITE


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--areas: deselect the conformance tests of the other areas; the corpus replays first; the
    suite's settings on its own properties.  Collecting the suite without an adapter is a usage error."""
    state = config.stash[_KEY]
    if state.spec is None and any("conformance" in getattr(i, "fixturenames", ()) for i in items):
        raise pytest.UsageError(
            f"the conformance suite needs an adapter: --adapter NAME with a built-in one "
            f"({', '.join(sorted(BUILTIN))}), module:factory, or process:<command line> "
            f"(or $CONFORMANCE_ADAPTER)")
    for item in items:
        if is_property(item) and is_suite_item(item):
            apply_settings(item, state)
    chosen = set(selected_areas(config))
    keep = [i for i in items if set(item_areas(i)) <= chosen]
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    # The corpus replays first, the coverage floors come last; otherwise in order (a stable sort).
    keep.sort(key=lambda i: (i.get_closest_marker("corpus") is None) + (i.get_closest_marker("coverage_floor")
                                                                         is not None))
    items[:] = keep


def apply_settings(item: pytest.Item, state: _State) -> None:
    """The suite's hypothesis settings for one of its properties (read by hypothesis when the test
    runs), instead of a profile loaded for the whole session."""
    test = getattr(item, "obj", None)
    if test is not None:
        test._hypothesis_internal_use_settings = state.settings  # type: ignore[attr-defined]


def is_property(item: pytest.Item) -> bool:
    """A hypothesis property (not a spec example, a corpus case or a coverage check)."""
    return bool(getattr(getattr(item, "obj", None), "is_hypothesis_test", False))


def coverage_state(config: pytest.Config) -> Tally:
    """The run's generator coverage so far (floors_waived says where its floors do not apply)."""
    return config.stash[_KEY].tally


def floors_waived(config: pytest.Config, area: str) -> str | None:
    """Why the area's coverage floors do not apply to this run, or None when they do: they are set
    for a full run of its properties, every capability, scripted completions and the default budget."""
    state = config.stash[_KEY]
    if area in state.deselected_areas:
        return f"some {area} properties were deselected; the floors apply to them all"
    conformance = state.conformance
    if conformance is None:  # an xdist controller: the workers named the areas whose floors it checks
        return None if area in state.floors_left else "the workers' coverage test skipped (its reason)"
    caps = conformance.capabilities()
    lacking = [c for c in areas()[area].all_capabilities() if unsupported(caps, c) is not None]
    if lacking or conformance.completion_order(area) != SCRIPTED:
        why = ", ".join(lacking) or f"completion order {conformance.completion_order(area)}"
        return f"the adapter lacks {why}, so the schedules are drawn without it"
    examples = adapter_attribute(conformance.spec, "examples")
    if examples is not None and examples < PROFILES["default"]["max_examples"]:
        return (f"the adapter runs {examples} examples a property, fewer than the "
                f"{PROFILES['default']['max_examples']} the floors are set for (the reference's run "
                "checks them on the same generators)")
    return None


def pytest_deselected(items: Sequence[pytest.Item]) -> None:
    """Remember the areas whose properties were not all selected: their coverage floors do not apply."""
    for item in items:
        state = item.config.stash.get(_KEY, None)
        if state is not None and is_property(item):
            state.deselected_areas.update(item_areas(item))


def run_facts(state: _State, adapter: Adapter) -> dict[str, Any]:
    """What a reader of a CI log needs first (the header, and the JSON report's `run`): the adapter's
    version and completion order, the hypothesis profile and seed, the capabilities of the areas run."""
    caps = dict(adapter.capabilities())
    known = dict.fromkeys(c for area in state.areas for c in (area, *areas()[area].all_capabilities()))
    derandomized = state.settings.derandomize
    return {"adapter_version": getattr(adapter, "version", None),
            "completion_order": adapter.completion_order, "profile": state.profile,
            "seed": None if derandomized else state.seed,
            "capabilities": {c: unsupported(caps, c) for c in known}}


def header(state: _State, adapter: Adapter) -> list[str]:
    """The header's lines, from `state.run` (run_facts)."""
    run = state.run
    version, seed = run["adapter_version"], run["seed"]
    caps = run["capabilities"]
    supported = [c for c, reason in caps.items() if reason is None]
    lacking = [c for c, reason in caps.items() if reason is not None]
    seeding = ("derandomized: the same schedules every run" if seed is None
               else f"seed {seed} (the same schedules again: --hypothesis-seed {seed})")
    return [
        f"conformance: adapter {adapter.name} ({state.spec}"
        + (f", version {version}" if version else "")
        + f"); completion order {', '.join(sorted(set(completion_orders(adapter))))}",
        f"conformance: profile {state.profile}, {seeding}",
        f"conformance: areas {', '.join(state.areas)}",
        f"conformance: capabilities supported ({len(supported)}): {', '.join(supported) or 'none'}",
        f"conformance: capabilities unsupported ({len(lacking)}, the reasons in the summary): "
        f"{', '.join(lacking) or 'none'}",
    ]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Load the adapter when a collected test uses it; a load failure ends the run with one line."""
    state = session.config.stash[_KEY]
    if not any("conformance" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    if state.spec is None:  # pytest_collection_modifyitems refused a run of the suite without one
        return
    try:
        adapter = load_adapter(state.spec)
    except AdapterError as e:
        sys.stderr.write(f"conformance: cannot load adapter {state.spec!r}: {e}\n")
        sys.stderr.flush()
        pytest.exit(f"cannot load adapter {state.spec!r}", returncode=4)
    # Again, now that it is built: a process adapter declares these in its hello (registry.py).
    configure_adapter(session.config, state, state.spec)
    for item in session.items:
        if is_property(item) and is_suite_item(item):
            apply_settings(item, state)
    if any(order not in (SCRIPTED, FREE) for order in completion_orders(adapter)):
        sys.stderr.write(f"conformance: adapter {state.spec!r} has completion_order "
                         f"{adapter.completion_order!r}; use flink_semantics.spec.adapter.SCRIPTED or FREE, "
                         "or a mapping of areas to them\n")
        pytest.exit(f"bad adapter {state.spec!r}", returncode=4)
    state.conformance = Conformance(adapter, state.spec, state.deadline, state.batch_size,
                                    keep_going=session.config.getoption("conformance_keep_going"))
    state.conformance.expected_failures, state.conformance.strict = state.expected_failures, state.strict
    state.run = run_facts(state, adapter)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:  # before the engine starts: a CI log shows what runs at once
        for line in header(state, adapter):
            reporter.write_line(line)
    if hasattr(adapter, "prepare"):  # start the engine now, apart from the properties' time
        started = time.monotonic()
        try:
            prepare_captured(session.config, adapter.prepare)
        except AdapterError as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            sys.stderr.write(f"conformance: adapter {state.spec!r} could not start: {first}\n")
            sys.stderr.flush()
            pytest.exit(f"adapter {state.spec!r} could not start", returncode=4)
        state.startup = time.monotonic() - started
    if session.config.getoption("conformance_progress") or state.profile.startswith("thorough"):
        start_progress(session, state)


def prepare_captured(config: pytest.Config, prepare: Callable[[], None]) -> None:
    """Run the adapter's prepare() inside pytest's output capture.  The processes an engine starts
    there (Spark's JVM, and through it Spark's Python workers) keep the captured stdout and stderr
    for their lives: what they print later (Spark's warnings, the TransformWithStateInPandas worker's
    lines at each query start) goes to the output of the test that runs then, shown if it fails,
    not onto the terminal between the progress lines.  What prepare() itself printed goes with the
    first test's output, or, when prepare() fails, onto stderr after it (its last 40 lines)."""
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is None or not capture.is_globally_capturing():  # -s: the user asked to see it all
        prepare()
        return
    capture.resume_global_capture()
    try:
        prepare()
    except BaseException:
        capture.suspend_global_capture()
        out, err = capture.read_global_capture()
        printed = (out + err).splitlines()[-40:]
        if printed:
            sys.stderr.write("conformance: the engine printed while it started:\n"
                             + "".join(f"  {line}\n" for line in printed))
        raise
    capture.suspend_global_capture()


def start_progress(session: pytest.Session, state: _State) -> None:
    """The progress line: properties done (and the current one's share of its examples), schedules
    validated per area, ETA.  Written past pytest's output capture; not from xdist workers."""
    if hasattr(session.config, "workerinput") or state.conformance is None:
        return
    conformance = state.conformance
    properties = {i.nodeid for i in session.items if is_property(i)}
    state.properties = properties
    total = len(properties)
    reporter = session.config.pluginmanager.getplugin("terminalreporter")
    capture = session.config.pluginmanager.getplugin("capturemanager")

    def write(line: str) -> None:
        if reporter is None:
            return
        with capture.global_and_fixture_disabled() if capture is not None else nullcontext():
            reporter.write_line(line)

    state.progress = Progress(total, f"conformance ({state.spec})", write=write)

    def update(detail: str, force: bool = False) -> None:
        """Properties done plus the current one's share of its examples, and `detail`."""
        share = min(conformance.examples / max(state.settings.max_examples, 1), 0.99)
        assert state.progress is not None
        state.progress.update(state.items_done + share, f"{state.items_done} of {total} properties done; "
                              f"{detail}", force=force)

    def on_example() -> None:
        validated = ", ".join(f"{a} {n}" for a, n in sorted(conformance.validated.items()))
        update(f"schedules validated: {validated or 'none yet'}")

    def on_wait(size: int, waited: float) -> None:  # a line a minute while a long batch runs
        update(f"a batch of {size} schedules running for {duration(waited)}", force=True)

    conformance.on_example, conformance.on_wait = on_example, on_wait
    state.progress.update(0, f"{total} properties", force=True)


@pytest.fixture(scope="session")
def conformance(pytestconfig: pytest.Config) -> Conformance:
    state = pytestconfig.stash[_KEY]
    assert state.conformance is not None, "the adapter is loaded at the end of collection"
    return state.conformance


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """UNSUPPORTED: a property needs a capability the adapter lacks (reported, never silent)."""
    state = item.config.stash[_KEY]
    if state.conformance is None or "conformance" not in getattr(item, "fixturenames", ()):
        return
    state.conformance.item = item
    rules, lacking = item_rules(item), lacking_rules(item, state.conformance)
    claimed = [r for r in rules if r not in lacking]
    needs = [*item_areas(item), *(c for m in item.iter_markers("needs") for c in m.args)]
    missing = state.conformance.missing(needs, item_areas(item))
    runs = not missing and (bool(claimed) or not rules)
    name = state.conformance.name
    # A property that runs claims the rules it can show, and each rule it cannot is unsupported on its
    # own; one that does not run is unsupported for all of its rules.
    item.user_properties.append(("conformance_rules", claimed if runs else rules))
    item.user_properties.append(("conformance_rules_lacking", {
        r: f"[{r}] adapter {name!r} lacks {why}" for r, why in lacking.items()} if runs else {}))
    item.user_properties.append(("conformance_replay", item.get_closest_marker("corpus") is not None))
    if not runs:
        why = "; ".join([f"{cap}: {reason}" for cap, reason in missing] or dict.fromkeys(lacking.values()))
        pytest.skip(f"{UNSUPPORTED} [{', '.join(rules)}] adapter {name!r} lacks {why}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Run a property gathering its batches into the adapter's jobs; replay it after a difference.

    The replay is the same hypothesis run (derandomized, or under the same seed), so it meets the
    same batch first; the adapter's traces are kept, so only the batches that shrinking makes are
    run again.  Hypothesis then shrinks the failing batch to one schedule, and that schedule.
    """
    state = item.config.stash[_KEY]
    conformance = state.conformance
    if conformance is None or "conformance" not in getattr(item, "fixturenames", ()):
        return (yield)
    test = getattr(item, "obj", None)
    if test is not None and not state.settings.derandomize and getattr(test, "is_hypothesis_test", False):
        # The replay must draw what this run draws; the run's seed (in the header) gives every
        # property its own, so --hypothesis-seed with it draws the same schedules again.  Only a
        # property drawn with @given: hypothesis refuses @seed on a test without it (the spec's
        # examples and the corpus replay fixed schedules).
        hypothesis_seed(zlib.crc32(f"{state.seed}:{item.nodeid}".encode()))(test)
    conformance.gathering = _Gathering(conformance, conformance.batch_size,
                                        int(getattr(conformance.adapter, "concurrent_jobs", 1)))
    try:
        try:
            yield
        except _Found:
            pass  # a job met a difference: the examples left are not drawn; the replay below meets it
        finally:
            found = conformance.gathering.finish()
            conformance.gathering = None
        if found is not None:
            item.runtest()  # the replay raises the difference, shrunk
            raise found  # (not met again on replay: the first report, unshrunk)
    finally:
        conformance.gathering = None
        conformance.known = {}
        item.user_properties.append(("conformance_schedules", conformance.counts[item.nodeid]))
        item.user_properties.append(("conformance_adapter_schedules",
                                     conformance.through_adapter[item.nodeid]))
        item.user_properties.append(("conformance_coverage", conformance.tally.to_json()))
        item.user_properties.append(("conformance_areas", item_areas(item)))
        item.user_properties.append(("conformance_adapter", conformance.shown_by_adapter(item.nodeid)))
        item.user_properties.append(("conformance_differences",
                                     dict(conformance.differences.pop(item.nodeid, Counter()))))
        conformance.tally, conformance.examples = Tally(), 0
        if item.nodeid in conformance.found_after:
            item.user_properties.append(("conformance_found_after", conformance.found_after[item.nodeid]))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Show a conformance failure as its report (plus hypothesis' notes), without a traceback."""
    report = yield
    exc = call.excinfo.value if call.excinfo is not None else None
    state = item.config.stash[_KEY]
    failure = exc if isinstance(exc, ConformanceFailure) else ConformanceFailure("")
    blamed = failure.rules or item_rules(item)
    if isinstance(exc, ConformanceFailure) and report.failed:
        # The report shows the shrunk schedule; of hypothesis' notes keep only how to replay it.
        notes = [n for n in getattr(exc, "__notes__", []) if "reproduce_failure" in n or "@seed" in n]
        # A divergence on the adapter's expected failures only is known, not a new counterexample: it
        # stays out of the corpus (else a run of spark-native fills the checkout with Spark's differences).
        known = on_expected_failures(blamed, state.expected_failures, state.strict)
        saved = [f"counterexample not saved: the adapter lists {', '.join(blamed)} as expected failures"] \
            if known else save_counterexample(state, item, exc)
        report.longrepr = "\n".join([str(exc), *saved, *notes])
    divergence: dict[str, Any] | None = None
    if state.conformance is not None and call.when == "call":
        divergence = state.conformance.known_divergences.pop(item.nodeid, None)
    if divergence is not None and report.passed:
        # The property ran in full; its one divergence was on the adapter's expected failures.
        report.user_properties.append(("conformance_known", divergence))
        report.outcome = "skipped"
        report.wasxfail = (f"{', '.join(divergence['blamed'])}: the adapter's expected failure(s); the "
                           "property's other rules were checked on all its schedules")
    if report.failed and call.when == "call" and state.conformance is not None \
            and "conformance" in getattr(item, "fixturenames", ()):
        # Which rules failed, and whether the level or the adapter's expected failures excuse it.
        spec = shlex.quote(str(state.spec))
        line = failure.reproducer or f"pytest {shlex.quote(item.nodeid)} --adapter {spec}"
        steps = len(failure.schedule.steps) if failure.schedule is not None else None
        report.user_properties.append(("conformance_failure", {"blamed": blamed, "reproducer": line,
                                                               "counterexample_steps": steps,
                                                               "possible": failure.possible}))
        why = V.excused(blamed, load_rules(), state.expected_failures, state.strict)
        if why is not None:
            report.outcome = "skipped"
            report.wasxfail = why
    return report


def save_counterexample(state: _State, item: pytest.Item, failure: ConformanceFailure) -> list[str]:
    """Save a divergence's counterexample in the corpus and draw its timeline next to it; the lines
    that say where (for the report)."""
    if failure.schedule is None or failure.expected is None:
        return []
    # Never inside the installed package: --corpus DIR, else pytest's cache (None when it is disabled).
    save_to = corpus.save_directory(state.corpus_option, getattr(item.config, "cache", None))
    if save_to is None:
        return ["counterexample not saved: no corpus to save it in (--corpus none, or pytest's cache "
                "disabled; --corpus DIR saves it in DIR)"]
    case = corpus.Case(failure.schedule, failure.expected, failure.observed, state.spec,
                       item.nodeid.split("::")[-1].split("[")[0], tuple(failure.rules), failure.step)
    try:
        path, new = corpus.save(save_to, case)
    except OSError as e:
        return [f"counterexample not saved: {e}"]
    lines = [f"counterexample {'saved to' if new else 'already in the corpus:'} {path}"]
    try:
        from flink_semantics.conformance.draw import draw_counterexample

        name = state.conformance.name if state.conformance else str(state.spec)
        pictures = draw_counterexample(case.schedule, case.expected, case.observed, case.step,
                                       adapter_name=name, stem=path.with_suffix(""), rules=case.rules,
                                       what=failure.what)
        lines.append("timeline: " + ", ".join(str(p) for p in pictures))
    except Exception as e:  # noqa: BLE001 - a picture that cannot be drawn must not hide the failure
        lines.append(f"timeline not drawn: {type(e).__name__}: {e}")
    return lines


def _per_property(state: _State) -> dict[str, tuple[int, int, list[str]]]:
    """Counts summed over the cases of a parametrized property: name -> (schedules, cases, rules)."""
    out: dict[str, tuple[int, int, list[str]]] = {}
    for result in state.ran():
        prop = result.nodeid.split("[", 1)[0]
        total, cases, rules = out.get(prop, (0, 0, []))
        rules += [r for r in result.rules if r not in rules]
        out[prop] = (total + result.schedules, cases + 1, rules)
    return out


def _rate(n: float, secs: float) -> str:
    return f"{n / secs:.0f}" if n >= 10 * secs else f"{n / secs:.2f}"  # slow engines: 0.42, not 0


def _area_rates(per_area: Mapping[str, list[float]]) -> list[str]:
    """Throughput per area, of the properties of one area each (bench/ compares them across adapters)."""
    if len(per_area) < 2:
        return []
    return ["throughput per area: " + "; ".join(
        f"{area} {int(n)} in {secs:.1f} s ({_rate(n, secs)}/s)"
        for area, (n, secs) in sorted(per_area.items()) if secs > 0)]


def _difference_lines(differences: Mapping[str, Counter[str]]) -> list[str]:
    """The traces compared with the reference, and how many differ, with the events lost and
    duplicated in them, per area (a fault run must show 0, 0 and 0)."""
    if not differences:
        return []
    return ["compared with the reference: " + "; ".join(
        f"{area} {c['compared']} traces, {c['different']} different, {c['lost']} events lost, "
        f"{c['duplicated']} duplicated or extra" for area, c in sorted(differences.items()))]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_KEY, None)
    if state is None or not state.results:
        return
    tr = terminalreporter
    if state.ran():
        tr.section(f"conformance: schedules per property (adapter {state.spec})")
        for prop, (n, cases, rules) in _per_property(state).items():
            shown = ", ".join(rules[:12]) + (f", … ({len(rules)} rules)" if len(rules) > 12 else "")
            each = f" in {cases} cases" if cases > 1 else ""
            tr.write_line(f"{prop} [{shown}]: {n} schedules{each}")
        if state.seconds > 0:
            n, secs = state.through_adapter, state.seconds
            rate = _rate(n, secs)
            tr.write_line(f"throughput: {n} distinct schedules drawn, run by the adapter and checked in "
                          f"{secs:.1f} s, {rate} per second (the wall time of the properties that "
                          f"ran them; the adapter started in {state.startup:.1f} s before them)")
            for line in _area_rates(state.per_area):
                tr.write_line(line)
            for line in _difference_lines(state.differences):
                tr.write_line(line)
        if state.conformance is not None and hasattr(state.conformance.adapter, "summary"):
            for line in state.conformance.adapter.summary():
                tr.write_line(f"{state.spec}: {line}")
    if state.unsupported():
        tr.section(f"conformance: {UNSUPPORTED} (adapter {state.spec})")
        for result in state.unsupported():
            tr.write_line(f"{UNSUPPORTED} {result.nodeid}: {result.reason}")
    waived = {a: why for a in state.areas if (why := floors_waived(config, a)) is not None}
    coverage = state.tally.lines(state.areas, waived)
    if coverage:  # areas that drew schedules
        tr.section(f"conformance: generator coverage (adapter {state.spec}; distinct schedules per "
                   "property reaching each rare state, and its floor)")
        for line in coverage:
            tr.write_line(line)
    for area, short in state.floors_short.items():
        tr.write_line(f"FAILED coverage floors of {area} (checked over all xdist workers' schedules): the "
                      f"generators reach these states less often than their floors (conformance/areas/"
                      f"{area}.py, COVERAGE):\n  " + "\n  ".join(short), red=True)
    if state.results:
        tr.section(f"conformance: verdicts per rule (adapter {state.spec}; areas {', '.join(state.areas)}"
                   f"{'; strict' if state.strict else ''})")
        for line in V.table(state.verdicts()):
            tr.write_line(line)
        if state.report_path:
            tr.write_line(f"report written to {state.report_path}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(_KEY, None)
    if state is None:
        return
    if state.conformance is not None:
        state.conformance.adapter.close()
    if state.floors_left and not hasattr(session.config, "workerinput"):
        _check_floors_left(session, state)
    if state.results and not hasattr(session.config, "workerinput"):  # the xdist controller, or no xdist
        verdicts = state.verdicts()
        if state.report_path:
            Path(state.report_path).parent.mkdir(parents=True, exist_ok=True)
            with open(state.report_path, "w", encoding="utf-8") as fh:
                report = V.report_json(str(state.spec), state.areas, verdicts, state.results.values(),
                                       state.run)
                report["coverage"] = state.tally.to_json()
                report["throughput"] = {area: {"schedules": int(n), "seconds": round(secs, 1)}
                                        for area, (n, secs) in sorted(state.per_area.items())}
                kinds = ("compared", "different", "lost", "duplicated")
                report["differences"] = {area: {k: c[k] for k in kinds}
                                         for area, c in sorted(state.differences.items())}
                json.dump(report, fh, indent=2)
        if V.run_fails(verdicts, state.strict) and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # --strict: a stale expected failure


def _check_floors_left(session: pytest.Session, state: _State) -> None:
    """Under xdist each worker sees a part of the schedules, so test_coverage.py leaves the floors to
    the controller, which holds every worker's tally: a state below its floor fails the run here,
    named in the terminal summary."""
    short = {area: state.tally.shortfalls(area) for area in sorted(state.floors_left)
             if state.tally.drawn[area]}
    state.floors_short = {area: lines for area, lines in short.items() if lines}
    if state.floors_short and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    """A session ended by a failing adapter says why in one line on stderr, after output capture."""
    state = config.stash.get(_KEY, None)
    if state is not None and state.conformance is not None and state.conformance.fatal:
        sys.stderr.write(state.conformance.fatal_detail)
        sys.stderr.write(state.conformance.fatal + "\n")
        sys.stderr.flush()
