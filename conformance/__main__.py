"""Command line of the conformance suite.

    python -m flink_semantics.conformance replay SCHEDULE.json --adapter NAME   the adapter's trace as JSON
    python -m flink_semantics.conformance check SCHEDULE.json --adapter NAME    compare it with the reference
    python -m flink_semantics.conformance draw SCHEDULE.json [--adapter NAME]   its timeline (SVG and PNG)
    python -m flink_semantics.conformance matrix REPORT.json ...                rules x adapters
    python -m flink_semantics.conformance strength MODULE ...                   run wrong adapters

SCHEDULE.json may be `-` for stdin, or give the schedule inline with --json '<text>'.
replay and check exit with 0 conforms (or replayed), 1 does not conform, 2 malformed schedule,
3 adapter error.  Each other subcommand lives in its own module (`configure(parser)` adds its
arguments, `run(args)` returns the exit status): conformance/draw.py, matrix.py, strength.py.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

from flink_semantics.conformance.checker import compare, format_report
from flink_semantics.conformance.registry import BUILTIN, load_adapter
from flink_semantics.reference import expected_trace
from flink_semantics.spec.adapter import AdapterError, completion_order
from flink_semantics.spec.schedule import Schedule, ScheduleError, Trace, parse_schedule

# Subcommands with a module of their own: name -> module.
MODULES = {"draw": "flink_semantics.conformance.draw", "matrix": "flink_semantics.conformance.matrix",
           "strength": "flink_semantics.conformance.strength"}


def read_schedule_text(args: argparse.Namespace) -> str:
    """The schedule's JSON text: --json, a file, or stdin (`-`)."""
    if args.json is not None:
        return str(args.json)
    if args.schedule in (None, "-"):
        if args.schedule is None and sys.stdin.isatty():
            raise SystemExit("give a schedule file, '-' for stdin, or --json '<schedule>'")
        return sys.stdin.read()
    with open(args.schedule, encoding="utf-8") as f:
        return f.read()


def add_schedule_arguments(parser: argparse.ArgumentParser,
                           adapter_default: str | None = "reference") -> None:
    parser.add_argument("schedule", nargs="?", help="schedule JSON file, or - for stdin")
    parser.add_argument("--json", help="the schedule as JSON text")
    parser.add_argument("--adapter", default=adapter_default,
                        help=f"{', '.join(sorted(BUILTIN))} or module:factory")


def run_one(adapter_spec: str, schedule: Schedule) -> tuple[str, str, Trace]:
    """One schedule through an adapter: (its name, its completion order, the trace)."""
    adapter = load_adapter(adapter_spec)
    try:
        traces = adapter.run_batch([schedule])
        if not isinstance(traces, (list, tuple)) or len(traces) != 1 or not isinstance(traces[0], Trace):
            got = f"{len(traces)} value(s)" if isinstance(traces, (list, tuple)) else type(traces).__name__
            raise AdapterError(f"run_batch returned {got} for 1 schedule; it must return one Trace per "
                               "schedule")
        return str(adapter.name), completion_order(adapter, schedule.area), traces[0]
    finally:
        adapter.close()


def replay_or_check(args: argparse.Namespace) -> int:
    try:
        # A configuration the operator refuses is not malformed: it must give a `rejected` trace.
        schedule = parse_schedule(read_schedule_text(args), validate=False)
        expected = expected_trace(schedule)  # validates; raises ScheduleError for malformed schedules
    except OSError as e:
        where = e.filename or args.schedule
        print(f"conformance {args.command}: {e.strerror or e}: {where}", file=sys.stderr)
        return 2
    except ScheduleError as e:
        print(f"malformed schedule: {e}", file=sys.stderr)
        return 2
    try:
        name, order, trace = run_one(args.adapter, schedule)
    except AdapterError as e:
        print(f"conformance: adapter {args.adapter!r}: {e}", file=sys.stderr)
        return 3
    except Exception as e:  # a bug in the adapter: one line, as the suite reports a broken adapter
        first = (str(e).strip().splitlines() or [""])[0]
        print(f"conformance: adapter {args.adapter!r} is broken: run_batch raised "
              f"{type(e).__name__}: {first}", file=sys.stderr)
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


class _Parser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr (the command and the problem; --help for the usage), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (--help for the usage)\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m flink_semantics.conformance", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, what in (("replay", "print the adapter's trace of a schedule as JSON"),
                       ("check", "compare the adapter's trace of a schedule with the reference")):
        sub = commands.add_parser(name, help=what, description=what)
        add_schedule_arguments(sub)
        sub.set_defaults(run=replay_or_check)
    for name, module_name in MODULES.items():
        module = importlib.import_module(module_name)
        first = (module.__doc__ or name).strip().splitlines()[0]
        sub = commands.add_parser(name, help=first, description=module.__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        module.configure(sub)
        sub.set_defaults(run=module.run)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
