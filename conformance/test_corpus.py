"""The corpus of counterexamples (conformance/corpus.py), replayed first, against the adapter under test.

Every counterexample the suite has found, against any adapter, is saved with the reference's trace
of it; each run replays those of the areas it runs before any property (the plugin puts these cases
first).  All the cases the adapter can run go to it in ONE `run_batch` call (a module-scoped
fixture); each case is then one test marked with the rules its report named, compared with the
reference trace by the checker.  A case that needs a capability the adapter lacks is reported as
UNSUPPORTED (`needs` marker).  A case whose saved trace the reference no longer gives, or that is
no longer a valid schedule, fails: the oracle changed, and the saved case must be looked at again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from flink_semantics.conformance import corpus
from flink_semantics.conformance.checker import free_checkable
from flink_semantics.conformance.plugin import Conformance
from flink_semantics.reference import expected_trace
from flink_semantics.spec.schedule import ScheduleError, Trace, required_capabilities, validate_schedule

pytestmark = pytest.mark.corpus


def needs(case: corpus.Case) -> list[str]:
    """The capabilities a case needs; "scripted" unless a FREE adapter can be checked on it."""
    try:
        validate_schedule(case.schedule)
    except ScheduleError:
        return []  # rejected or malformed: the test says which
    caps = set(required_capabilities(case.schedule))
    if not free_checkable(case.schedule):
        caps.add("scripted")
    return sorted(caps)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" not in metafunc.fixturenames:
        return
    from flink_semantics.spec.area import areas

    root = corpus.directory(metafunc.config.getoption("corpus", None))
    params = []
    for area in areas():
        for path, case in corpus.cases(root, area):
            marks = [pytest.mark.area(area), pytest.mark.needs(*needs(case))]
            if case.rules:
                marks.append(pytest.mark.rule(*case.rules))
            params.append(pytest.param(path, case, id=f"{area}/{path.stem}", marks=marks))
    if not params:
        params = [pytest.param(None, None, id="empty")]
    metafunc.parametrize(("path", "case"), params)


@pytest.fixture(scope="module")
def observed(conformance: Conformance, request: pytest.FixtureRequest) -> dict[corpus.Case, Trace]:
    """One run_batch of every case the adapter supports (and that is still a valid schedule)."""
    cases = []
    for other in request.session.items:
        callspec = getattr(other, "callspec", None)
        case = callspec.params.get("case") if callspec is not None else None
        if isinstance(case, corpus.Case) and not conformance.missing([case.area, *needs(case)], [case.area]):
            try:
                expected_trace(case.schedule)
            except ScheduleError:
                continue
            cases.append(case)
    cases = list(dict.fromkeys(cases))
    item, conformance.item = conformance.item, None  # each case counts its own schedule below
    try:
        traces = conformance.run_batch([c.schedule for c in cases]) if cases else []
    finally:
        conformance.item = item
    return dict(zip(cases, traces))


def test_corpus(conformance: Conformance, observed: dict[corpus.Case, Trace], path: Path | None,
                case: corpus.Case | None) -> None:
    """A saved counterexample: the reference still gives its saved trace, and the adapter's trace
    conforms to it."""
    if case is None:
        conformance.count(0)
        return  # no corpus (--corpus none, or none saved yet): nothing to replay
    try:
        want = expected_trace(case.schedule)
    except ScheduleError as e:
        pytest.fail(f"corpus file {path} is no longer a valid schedule ({e}); "
                    "look at it again and delete it if the spec changed on purpose")
    if want != case.expected:
        pytest.fail(f"corpus file {path}: the reference's trace changed since it was saved; "
                    "look at it again and delete it if the spec changed on purpose\n"
                    f"saved:     {case.expected.to_json()}\nreference: {want.to_json()}")
    conformance.count(1, adapter=True)
    conformance.verify(case.schedule, observed[case])
