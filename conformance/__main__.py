"""Command line: run one schedule through an adapter.

    python -m conformance replay SCHEDULE.json --adapter NAME     print the adapter's trace as JSON
    python -m conformance check SCHEDULE.json --adapter NAME      compare it with the reference

SCHEDULE.json may be `-` for stdin, or give the schedule inline with --json '<text>'.
Exit status: 0 conforms (or replayed), 1 does not conform, 2 malformed schedule, 3 adapter error.
"""

from __future__ import annotations

import argparse
import sys

from conformance.checker import compare, format_report
from conformance.registry import BUILTIN, load_adapter
from reference import expected_trace
from spec.adapter import AdapterError
from spec.schedule import Schedule, ScheduleError, Trace, parse_schedule


def _read(args: argparse.Namespace) -> str:
    if args.json is not None:
        return str(args.json)
    if args.schedule in (None, "-"):
        if args.schedule is None and sys.stdin.isatty():
            raise SystemExit("give a schedule file, '-' for stdin, or --json '<schedule>'")
        return sys.stdin.read()
    with open(args.schedule, encoding="utf-8") as f:
        return f.read()


def _run(adapter_spec: str, schedule: Schedule) -> tuple[str, str, Trace]:
    adapter = load_adapter(adapter_spec)
    try:
        (trace,) = adapter.run_batch([schedule])
        return str(adapter.name), str(adapter.completion_order), trace
    finally:
        adapter.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("replay", "check"))
    parser.add_argument("schedule", nargs="?", help="schedule JSON file, or - for stdin")
    parser.add_argument("--json", help="the schedule as JSON text")
    parser.add_argument("--adapter", default="reference",
                        help=f"{', '.join(sorted(BUILTIN))} or module:factory")
    args = parser.parse_args(argv)
    try:
        # A configuration the operator refuses is not malformed: it must give a `rejected` trace.
        schedule = parse_schedule(_read(args), validate=False)
        expected = expected_trace(schedule)  # validates; raises ScheduleError for malformed schedules
        name, order, trace = _run(args.adapter, schedule)
    except ScheduleError as e:
        print(f"malformed schedule: {e}", file=sys.stderr)
        return 2
    except AdapterError as e:
        print(f"conformance: adapter {args.adapter!r}: {e}", file=sys.stderr)
        return 3
    if args.command == "replay":
        print(trace.to_json(indent=None))
        return 0
    mismatch = compare(schedule, expected, trace, order)
    if mismatch is None:
        print(f"conforms: adapter {name!r} gives the reference trace ({len(trace)} events)")
        return 0
    print(format_report(schedule, mismatch, adapter_name=name, adapter_spec=args.adapter,
                        expected=expected, observed=trace))
    return 1


if __name__ == "__main__":
    sys.exit(main())
