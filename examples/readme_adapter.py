"""The complete adapter of README.md ("A complete adapter"): the lines between the markers are the
README's block, word for word (tests/test_example_adapter.py checks it, and runs the suite on it).

    pytest conformance --adapter examples.readme_adapter:make_adapter --areas mini_batch

examples/mini_batch_engine.py is the longer example that docs/writing-an-adapter.md walks through.
"""

# example:start
from collections import Counter

from flink_semantics.spec.adapter import SCRIPTED
from flink_semantics.spec.areas.mini_batch import RETRACTIONS, event
from flink_semantics.spec.schedule import Trace


def result(held):  # MB-30: COUNT, SUM (a Java long: it wraps around), MIN and MAX of the values held
    total = sum(v * n for v, n in held.items())
    return {"count": held.total(), "sum": (total + 2**63) % 2**64 - 2**63, "min": min(held), "max": max(held)}


class TinyEngine:
    """SELECT k, COUNT(*), SUM(v), MIN(v), MAX(v) GROUP BY k: row by row, or in bundles of `size` rows."""

    name = "tiny-engine"
    completion_order = SCRIPTED  # it follows the schedule step by step

    def capabilities(self):  # opt-in: the area's core; any capability not named is unsupported
        return {"mini_batch": None, "mini_batch.watermarks": "tiny-engine has no watermarks"}

    def run_batch(self, schedules):  # one Trace per schedule, in order
        return [Trace(tuple(self.run(s.config, s.steps))) for s in schedules]

    def run(self, config, rows):  # with these capabilities, every step is a RowStep
        state, bundle, events = {}, [], []
        for i, row in enumerate(rows):
            bundle.append(row)
            if config.enabled and len(bundle) < config.size:  # MB-10 (MB-24: no bundles when off)
                continue
            for key in dict.fromkeys(r.key for r in bundle):  # MB-9, MB-17: a key's rows in order
                old, mine = state.pop(key, None), [r for r in bundle if r.key == key]
                while old is None and mine and mine[0].kind in RETRACTIONS:
                    mine.pop(0)  # MB-18: leading retractions of a key without state are dropped
                held = Counter(old)
                for r in mine:
                    held[r.value] += -1 if r.kind in RETRACTIONS else 1
                new = state[key] = +held  # the values held, with their multiplicity
                if not new:  # MB-23: the count dropped to zero
                    del state[key]
                    changes = [("-D", old)] if old else []
                elif not old:
                    changes = [("+I", new)]  # MB-19
                elif config.ttl or result(new) != result(old):  # MB-20 (MB-21, MB-22)
                    changes = [("-U", old)] * config.update_before + [("+U", new)]
                else:
                    changes = []
                events += [event(i, "out", key=key, change=c, **result(h)) for c, h in changes]
            bundle = []
        return events

    def close(self):
        pass


def make_adapter():
    return TinyEngine()
# example:end
