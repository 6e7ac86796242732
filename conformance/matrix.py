"""(being written: issue 11)"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    raise SystemExit("python -m conformance matrix: not written yet")
