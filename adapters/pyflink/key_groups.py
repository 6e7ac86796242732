"""Key groups on Flink itself: PyFlink's `key_by`, with the subtask of every update observed in the job.

A batch of schedules is one Flink job.  Its updates are grouped by (parallelism, explicit maximum
parallelism, key type); each group is a pipeline of the job: a bounded source of the group's
updates `(schedule, step, key, value)` at parallelism 1, PyFlink's `key_by` on the key (typed
INT, BIGINT or STRING), and a Python `KeyedProcessFunction` at the schedule's parallelism (and
maximum parallelism, when the schedule sets one) that adds the value to the key's sum in keyed
`MapState` (one entry per schedule, so schedules sharing a pipeline keep their own sums) and emits
the subtask it runs in.  Routing depends on the key alone, so sharing a pipeline changes nothing
of what is observed; the source sends each schedule's updates in step order on one channel, so a
key's sums follow the steps.

Observed in the job: the subtask of each update and the key's sum there.  The hash and the key
group of the `routed` event are Flink's own functions called in Flink's JVM (`MathUtils.murmurHash`,
`KeyGroupRangeAssignment.computeKeyGroupForKeyHash` / `assignToKeyGroup`, with the default maximum
parallelism of `computeDefaultMaxParallelism`) on the JDK hash code of the key (profile `flink`)
or on the key PyFlink routes by, `Row.of(key)` (profile `pyflink`, KG-33).  A configuration is
rejected when Flink's own checks refuse it (`KeyGroupRangeAssignment.checkParallelismPreconditions`,
`computeKeyGroupRangeForOperatorIndex`), without a job.

Measured on the 2-core machine (thread mode): a PyFlink job costs about 2 s to start plus about
0.4 s per Python subtask (a pipeline at parallelism p starts p + 1); the area's whole run (a job per
property, about 20 schedules each, and one for the spec examples) takes about 20 s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flink_semantics.spec.area import get_area
from flink_semantics.spec.areas.key_groups import UpdateStep
from flink_semantics.spec.schedule import Schedule, Trace, rejected

CAPABILITIES: dict[str, str | None] = {
    "key_groups": None,
    "key_groups.pyflink_hash": None,
    "key_groups.many_subtasks": "a local mini-cluster on two cores runs a few dozen subtasks, each with a "
                                "Python interpreter, not thousands (KG-9 and KG-10's examples)",
    "key_groups.spark_hash": "Flink has no Spark hash: the spark profile describes Spark's hash() "
                             "(KG-22..KG-30)",
    "key_groups.restore": "not built yet: a checkpoint and a restore need a stop-with-savepoint and a "
                          "second job per schedule, and a probe of every key to see where its restored "
                          "state is",
    "key_groups.rescale": "not built yet: needs key_groups.restore (a savepoint restored at another "
                          "parallelism)",
    "key_groups.operator_state": "not built yet: operator list state is only seen across a savepoint and "
                                 "restore (key_groups.restore)",
}

_ROW_REASON = ("PyFlink's key_by keys by Row.of(key) (flink-python 2.3.0 KeyByKeySelector), not by the "
               "key: the hash code Flink routes by is 62 + the key's JDK hash code, so an update reaches "
               "the subtask of another key group than KG-1's (e.g. key 7 with max parallelism 128 goes "
               "to key group 17, not 113); the spec states PyFlink's routing as the pyflink profile "
               "(KG-33), which Flink passes")
EXPECTED_FAILURES: dict[str, str] = {
    "KG-6": _ROW_REASON,
    "KG-7": "PyFlink's key_by routes a null key instead of refusing it: the key Flink checks is "
            "Row.of(null), which is not null (its hash code is 31), so KeyGroupRangeAssignment's "
            "checkNotNull passes (KG-33)",
}

def _type_info(type_: str) -> Any:
    from pyflink.common import Types

    return {"int": Types.INT(), "long": Types.LONG(), "string": Types.STRING()}[type_]


class FlinkFunctions:
    """Flink's own key-group functions, called in Flink's JVM (cached per key)."""

    def __init__(self) -> None:
        from flink_semantics.adapters.pyflink.session import jvm

        self.jvm = jvm()
        self.kga = self.jvm.org.apache.flink.runtime.state.KeyGroupRangeAssignment
        self.murmur = self.jvm.org.apache.flink.util.MathUtils.murmurHash
        self._cache: dict[tuple[Any, ...], tuple[int, int]] = {}

    def refusal(self, parallelism: int, max_parallelism: int | None) -> str | None:
        """Flink's reason to refuse the configuration, or None."""
        from py4j.protocol import Py4JJavaError

        try:
            self.kga.checkParallelismPreconditions(parallelism)
            if max_parallelism is not None:
                self.kga.checkParallelismPreconditions(max_parallelism)
            self.kga.computeKeyGroupRangeForOperatorIndex(self.max_parallelism(parallelism, max_parallelism),
                                                          parallelism, 0)
        except Py4JJavaError as e:
            return str(e.java_exception.getMessage())
        return None

    def max_parallelism(self, parallelism: int, explicit: int | None) -> int:
        return explicit if explicit is not None else int(self.kga.computeDefaultMaxParallelism(parallelism))

    def _array(self, key: int | str | None, type_: str) -> Any:
        """A Java `Object[]` holding the key as the job's JVM does (Integer, Long, String or null).

        py4j turns a Python int into an Integer when it fits, so a long goes through a `long[]`
        boxed in Java (`Arrays.stream(long[]).boxed().toArray()`)."""
        from pyflink.java_gateway import get_gateway

        gateway = get_gateway()
        if type_ == "long" and key is not None:
            longs = gateway.new_array(self.jvm.long, 1)
            longs[0] = key
            return self.jvm.java.util.Arrays.stream(longs).boxed().toArray()
        array = gateway.new_array(self.jvm.java.lang.Object, 1)
        if key is not None:
            array[0] = key
        return array

    def route(self, key: int | str | None, type_: str, profile: str, max_parallelism: int) -> tuple[int, int]:
        """(hash, key group) of the key under the profile, computed by Flink's functions."""
        item = (key, type_, profile, max_parallelism)
        if item not in self._cache:
            array = self._array(key, type_)
            if profile == "pyflink" or key is None:  # KG-33: the key Flink routes by is Row.of(key)
                code = int(self.jvm.org.apache.flink.types.Row.of(array).hashCode())
            else:  # KG-11: the key's JDK hash code (Arrays.hashCode([k]) is 31 + hashCode(k))
                code = _int32(int(self.jvm.java.util.Arrays.hashCode(array)) - 31)
            self._cache[item] = (int(self.murmur(code)),
                                 int(self.kga.computeKeyGroupForKeyHash(code, max_parallelism)))
        return self._cache[item]


def _int32(v: int) -> int:
    return (v + 2**31) % 2**32 - 2**31


def _sum_function() -> Any:
    """The keyed operator: the key's sum per schedule, and the subtask it runs in."""
    from flink_semantics.adapters.pyflink.session import subtask_index
    from pyflink.common import Types
    from pyflink.datastream import KeyedProcessFunction
    from pyflink.datastream.state import MapStateDescriptor

    class Sum(KeyedProcessFunction):
        def open(self, ctx: Any) -> None:
            self.sums = ctx.get_map_state(MapStateDescriptor("sums", Types.LONG(), Types.LONG()))
            self.subtask = subtask_index(ctx)

        def process_element(self, value: Any, ctx: Any) -> Any:
            sid, step, _key, amount = value
            total = (self.sums.get(sid) or 0) + amount
            self.sums.put(sid, total)
            yield sid, step, self.subtask, total

    return Sum()


Groups = dict[tuple[int, int | None, str], list[tuple[int, int, Any, int]]]


def observe(groups: Groups) -> dict[tuple[int, int], tuple[int, int]]:
    """Run one job with a pipeline per group; (schedule, step) -> (subtask, sum) as observed."""
    from flink_semantics.adapters.pyflink.session import stream_environment
    from pyflink.common import Row, Types

    env = stream_environment()
    env.set_parallelism(1)
    out_type = Types.TUPLE([Types.LONG(), Types.INT(), Types.INT(), Types.LONG()])
    streams = []
    for (parallelism, max_parallelism, type_), rows in sorted(groups.items(), key=str):
        key_type = _type_info(type_)
        # A Row, not a tuple: its fields may be null (a null key).
        source = env.from_collection([Row(*r) for r in rows],
                                     type_info=Types.ROW([Types.LONG(), Types.INT(), key_type, Types.LONG()]))
        keyed = source.key_by(lambda r: r[2], key_type=key_type)
        stream = keyed.process(_sum_function(), output_type=out_type).set_parallelism(parallelism)
        if max_parallelism is not None:
            stream = stream.set_max_parallelism(max_parallelism)
        streams.append(stream)
    if not streams:
        return {}
    union = streams[0].union(*streams[1:]) if len(streams) > 1 else streams[0]
    with union.execute_and_collect("conformance key_groups") as results:
        return {(int(sid), int(step)): (int(subtask), int(total)) for sid, step, subtask, total in results}


def run_batch(schedules: Sequence[Schedule]) -> list[Trace]:
    flink = FlinkFunctions()
    refusals = [flink.refusal(s.config.parallelism, s.config.max_parallelism) for s in schedules]
    groups: Groups = {}
    for sid, (s, refusal) in enumerate(zip(schedules, refusals)):
        if refusal is not None:
            continue
        for step, u in enumerate(s.steps):
            if not isinstance(u, UpdateStep):  # the suite draws none: see CAPABILITIES
                raise ValueError(f"pyflink adapter: step {step} ({u.op}) of schedule {sid} is not supported "
                                 f"(key_groups.restore): {s.to_json()}")
            groups.setdefault((s.config.parallelism, s.config.max_parallelism, u.type), []).append(
                (sid, step, u.key, u.value))
    seen = observe(groups)
    traces = []
    for sid, (s, refusal) in enumerate(zip(schedules, refusals)):
        if refusal is not None:
            traces.append(Trace((rejected(refusal),)))
            continue
        max_p = flink.max_parallelism(s.config.parallelism, s.config.max_parallelism)
        routed = get_area("key_groups").event_kinds["routed"]
        events = []
        for step, u in enumerate(s.steps):
            subtask, total = seen[(sid, step)]
            h, kg = flink.route(u.key, u.type, s.config.hash, max_p)
            events.append(routed(step, key=u.key, type=u.type, hash=h, key_group=kg, subtask=subtask,
                                 value=total))
        traces.append(Trace(tuple(events)))
    return traces
