"""Command line of the conformance suite.

    python -m flink_semantics.conformance check SCHEDULE.json --adapter NAME    compare it with the reference
    python -m flink_semantics.conformance replay SCHEDULE.json --adapter NAME   the adapter's trace as JSON
    python -m flink_semantics.conformance rules ID ...                          print rules, where checked
    python -m flink_semantics.conformance draw SCHEDULE.json [--adapter NAME]   its timeline (SVG and PNG)
    python -m flink_semantics.conformance matrix REPORT.json ...                rules x adapters
    python -m flink_semantics.conformance strength MODULE ...                   run wrong adapters
    python -m flink_semantics.conformance reverdict REPORT.json ...             verdicts again from a report

SCHEDULE.json is a file, `-` for standard input, or the schedule inline with --json '<text>' (one
of them).  check and replay exit with 0 conforms (or replayed), 1 does not conform, 2 a usage error
or a malformed schedule, 3 the adapter could not run.  Each other subcommand lives in its own
module (`configure(parser)` adds its arguments, `run(args)` returns the exit status, `EXAMPLE` is
shown by --help): conformance/rules.py, draw.py, matrix.py, strength.py, reverdict.py.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import NoReturn

from flink_semantics.conformance.checker import compare, format_report, not_one_trace_each
from flink_semantics.conformance.registry import BUILTIN, UnknownAdapterError, load_adapter, resolve
from flink_semantics.reference import expected_trace
from flink_semantics.spec.adapter import AdapterError, completion_order
from flink_semantics.spec.schedule import Schedule, ScheduleError, Trace, parse_schedule

PROG = "python -m flink_semantics.conformance"

# Subcommands with a module of their own: name -> module.
MODULES = {"rules": "flink_semantics.conformance.rules", "draw": "flink_semantics.conformance.draw",
           "matrix": "flink_semantics.conformance.matrix", "strength": "flink_semantics.conformance.strength",
           "reverdict": "flink_semantics.conformance.reverdict"}

EXAMPLES = {
    "check": f"""examples:
  {PROG} check --adapter mypkg.engine:make_adapter schedule.json
  {PROG} check --adapter pyspark-local --json "$(cat schedule.json)"
  cat schedule.json | {PROG} check --adapter reference -
(a failing run of the suite prints such a line, with the shrunk schedule inline)""",
    "replay": f"""example:
  {PROG} replay --adapter pyspark-local schedule.json""",
}


class UsageError(Exception):
    """A usage error of a subcommand: one line on stderr, exit status 2."""


def read_schedule_text(args: argparse.Namespace) -> str:
    """The schedule's JSON text: --json, a file, or standard input (`-`), exactly one of them."""
    if args.json is not None and args.schedule is not None:
        raise UsageError(f"give a schedule file ({args.schedule}) or --json, not both")
    if args.json is not None:
        text = str(args.json)
        where = "--json"
    elif args.schedule is None:
        raise UsageError("give a schedule file, '-' for standard input, or --json '<schedule>'")
    elif args.schedule == "-":
        text = sys.stdin.read()
        where = "standard input"
    else:
        with open(args.schedule, encoding="utf-8") as f:
            text = f.read()
        where = str(args.schedule)
    if not text.strip():
        raise UsageError(f"{where} is empty: no schedule")
    return text


def add_schedule_arguments(parser: argparse.ArgumentParser, adapter_required: bool = True) -> None:
    parser.add_argument("schedule", nargs="?", metavar="SCHEDULE.json",
                        help="the schedule's JSON file, or - for standard input")
    parser.add_argument("--json", metavar="TEXT", help="the schedule as JSON text (instead of a file)")
    parser.add_argument("--adapter", required=adapter_required, metavar="NAME",
                        help=f"the adapter: a built-in one ({', '.join(sorted(BUILTIN))}), module:factory, "
                             "or 'process:<command line>' (docs/process-protocol.md)")


def check_adapter_name(spec: str | None) -> None:
    """An adapter name that is neither built in nor module:factory is a usage error."""
    if spec is not None:
        try:
            resolve(spec)
        except UnknownAdapterError as e:
            raise UsageError(str(e)) from None


def run_one(adapter_spec: str, schedule: Schedule) -> tuple[str, str, Trace]:
    """One schedule through an adapter: (its name, its completion order, the trace)."""
    adapter = load_adapter(adapter_spec)
    try:
        traces = adapter.run_batch([schedule])
        wrong = not_one_trace_each(traces, 1)
        if wrong is not None:
            raise AdapterError(wrong)
        return str(adapter.name), completion_order(adapter, schedule.area), traces[0]
    finally:
        adapter.close()


def events(n: int) -> str:
    return f"{n} event" if n == 1 else f"{n} events"


def replay_or_check(args: argparse.Namespace) -> int:
    check_adapter_name(args.adapter)
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
        print(f"conforms: adapter {name!r} gives the reference trace ({events(len(trace))})")
        return 0
    print(format_report(schedule, mismatch, adapter_name=name, adapter_spec=args.adapter,
                        expected=expected, observed=trace))
    return 1


def distribution_version() -> str:
    try:
        return version("flink-semantics")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown (not installed)"


class _Parser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr (the command and the problem; --help for the usage), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (--help for the usage)\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog=PROG, description=__doc__.split("\n\n")[0],
                     epilog="Each subcommand's --help says what it does, its arguments and an example.")
    parser.add_argument("--version", action="version", version=f"flink-semantics {distribution_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, what in (("check", "compare the adapter's trace of a schedule with the reference's; exit "
                                 "0 conforms, 1 does not conform (the report shows both traces), 2 usage "
                                 "error or malformed schedule, 3 the adapter could not run"),
                       ("replay", "run a schedule through an adapter and print its trace as JSON (exit 0, or "
                                  "2 and 3 as check)")):
        sub = commands.add_parser(name, help=what.split(";")[0].split(" (")[0], description=what,
                                  epilog=EXAMPLES[name], formatter_class=argparse.RawDescriptionHelpFormatter)
        add_schedule_arguments(sub)
        sub.set_defaults(run=replay_or_check)
    for name, module_name in MODULES.items():
        module = importlib.import_module(module_name)
        paragraphs = (module.__doc__ or name).strip().split("\n\n")
        sub = commands.add_parser(name, help=paragraphs[0].splitlines()[0],
                                  description="\n\n".join(paragraphs[:3]),
                                  epilog=getattr(module, "EXAMPLE", None),
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        module.configure(sub)
        sub.set_defaults(run=module.run)
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except UsageError as e:
        print(f"{PROG} {args.command}: {e} (--help for the usage)", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the output piped into a reader that stopped (`| head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
