"""Make the repository root importable, so that tests can name `tests.wrong_adapters` and friends."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
