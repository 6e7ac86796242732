"""`python -m flink_semantics.conformance`: the command line (conformance/cli.py)."""

import sys

from flink_semantics.conformance.cli import main

if __name__ == "__main__":
    sys.exit(main())
