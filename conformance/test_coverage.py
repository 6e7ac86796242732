"""Generator coverage floors (conformance/coverage.py), checked after the properties of each area.

An area's conformance module names the rare states where engines lose data and the least share of
its drawn schedules that must reach each one (`COVERAGE`).  After the area's properties ran (the
plugin puts these tests last), this test fails when a state fell below its floor: the generators
must then be made to reach it.  The floors hold for a full run of the area's properties with every
capability; a run that left some out (-k, an adapter without a capability) says so with a skip and
its reason.  Under xdist each worker sees a part of the schedules: the test skips there, and the
controller checks the floors over all workers' tallies at the end of the run (conformance/plugin.py,
`_check_floors_left`): a shortfall fails the run and is named in its summary.
"""

from __future__ import annotations

import pytest
from flink_semantics.conformance import coverage
from flink_semantics.conformance.plugin import Conformance, coverage_state, floors_waived
from flink_semantics.spec.area import areas

pytestmark = pytest.mark.coverage_floor

AREAS = [a for a in areas() if coverage.floors(a)]


@pytest.mark.parametrize("area", [pytest.param(a, marks=pytest.mark.area(a)) for a in AREAS])
def test_generator_coverage(conformance: Conformance, request: pytest.FixtureRequest, area: str) -> None:
    """The area's properties reached each rare state in at least its floor's share of their schedules."""
    conformance.count(0)
    tally = coverage_state(request.config)
    waived = floors_waived(request.config, area)
    if waived is not None:
        pytest.skip(f"coverage floors: {waived}")
    if hasattr(request.config, "workerinput"):
        request.node.user_properties.append(("conformance_floors_left", area))
        pytest.skip("coverage floors: the counts are spread over xdist workers; the controller checks them "
                    "over all workers' schedules at the end of the run (a shortfall fails the run)")
    if not tally.drawn[area]:
        pytest.skip(f"coverage floors: no {area} property drew schedules in this run")
    short = tally.shortfalls(area)
    assert not short, (f"{area}: the generators reach these states less often than their floors "
                       f"(conformance/areas/{area}.py, COVERAGE):\n  " + "\n  ".join(short))
