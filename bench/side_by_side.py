"""Every API against its alternatives, one after the other: `python bench/side_by_side.py [--quick]`.

Runs `bench/side_by_side_<area>.py` for each area that has one (or those named with `--areas`), each
in a process of its own, with the same extra arguments (`--quick` for the small sizes), and prints
their tables as they come; the exit status is the first non-zero one.  docs/benchmarks/<area>.md
gives each command's figures.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
AREAS = ("async_io", "sources", "watermarks", "key_groups", "mini_batch")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--areas", default=",".join(AREAS), help="comma-separated areas (default: all)")
    args, rest = parser.parse_known_args(argv)
    status = 0
    for area in args.areas.split(","):
        script = HERE / f"side_by_side_{area}.py"
        if not script.exists():
            print(f"== {area}: no {script.name}", flush=True)
            continue
        print(f"== {area}: {script.name} {' '.join(rest)}", flush=True)
        rc = subprocess.call([sys.executable, str(script), *rest])
        status = status or rc
    return status


if __name__ == "__main__":
    sys.exit(main())
