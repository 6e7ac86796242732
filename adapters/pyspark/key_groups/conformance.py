"""A key groups schedule run on the engine in conformance mode (`Run`), and the capabilities the
`pyspark` runner declares for the area (`CAPABILITIES`).

A checkpoint's snapshot is written to the schedule's store (JSON) and a restore reads it back; a
restore starts a new operator in the same task (the area has no injected task failures).
pyspark is not imported here.
"""

from __future__ import annotations

from flink_semantics.adapters.pyspark.key_groups.engine import KeyedOperator, Refused, parallelism_in_bounds
from flink_semantics.adapters.pyspark.runtime import ScheduleRun, ScheduleStore
from flink_semantics.spec.areas.key_groups import (
    AddStateStep,
    CheckpointStep,
    KeyGroupsConfig,
    RestoreStep,
    UpdateStep,
    event,
)
from flink_semantics.spec.schedule import Schedule, Step

# Opt-in (spec/adapter.py): every key groups capability this implementation supports.
CAPABILITIES: dict[str, str | None] = {
    "key_groups.spark_hash": None,
    "key_groups.pyflink_hash": "the pyflink profile is PyFlink's own key_by (KG-33); this implementation "
                               "routes as Flink's DataStream API does (the flink profile) or as Spark does",
    "key_groups.operator_state": None,
    "key_groups.restore": None,
    "key_groups.many_subtasks": None,
    "key_groups.rescale": None,
    # KG-34: the engine keys and hashes the Java String (its UTF-16 units; Spark's '?' for an unpaired
    # surrogate, KG-26); a schedule reaches the Spark task as JSON text, whose escapes carry any key.
    "key_groups.lone_surrogates": None,
}


class Run(ScheduleRun):
    """A key groups schedule on the engine's KeyedOperator."""

    def __init__(self, schedule: Schedule, store: ScheduleStore):
        super().__init__(schedule, store)
        self.config: KeyGroupsConfig = schedule.config
        self.op: KeyedOperator | None = None
        self.checkpoints = 0  # the latest checkpoint's id (0: none yet)

    @property
    def alive(self) -> bool:
        return True  # no step of this area fails the task

    def start(self, resume_step: int) -> bool:
        c = self.config
        if not parallelism_in_bounds(c.parallelism, c.max_parallelism):  # KG-8: the rejecting rule
            self.reject(f"KG-8: parallelism {c.parallelism} and max parallelism {c.max_parallelism} "
                        "out of bounds")
            return False
        self.op = KeyedOperator(c.parallelism, c.max_parallelism, c.hash)
        return True

    def apply(self, index: int, s: Step) -> None:
        op = self.op
        assert op is not None
        if isinstance(s, UpdateStep):
            r = op.update(s.key, s.type, s.value)
            if r is None:
                self.record_event(event(index, "null_key"))  # KG-7
            else:
                self.record_event(event(index, "routed", key=r.key, type=r.type, hash=r.hash,
                                        key_group=r.key_group, subtask=r.subtask, value=r.value))
        elif isinstance(s, AddStateStep):
            op.add_state(s.subtask, s.name, s.element, s.mode)
        elif isinstance(s, CheckpointStep):
            self.checkpoints += 1
            self.store.write_checkpoint(self.checkpoints, op.snapshot())
        elif isinstance(s, RestoreStep):
            self._restore(index, s)

    def _restore(self, index: int, s: RestoreStep) -> None:
        checkpoint = self.store.read_checkpoint(self.checkpoints) if self.checkpoints else None
        assert self.op is not None
        try:
            self.op.check_restore(s.parallelism, s.max_parallelism, checkpoint)  # KG-8, KG-15, KG-16
        except Refused as e:
            self.record_event(event(index, "restore_refused", reason=e.reason))
            return
        op = self.op = KeyedOperator.restore(s.parallelism, s.max_parallelism, self.config.hash, checkpoint)
        self.record_event(event(index, "restored", parallelism=op.p, max_parallelism=op.max_p))
        for i, first, last in op.ranges():  # KG-4
            self.record_event(event(index, "range", subtask=i, first=first, last=last))
        for t, kg, key, type_, value in op.keyed_entries():  # KG-13, KG-14
            self.record_event(event(index, "keyed", subtask=t, key_group=kg, key=key, type=type_,
                                    value=value))
        for t, name, elements in op.operator_entries():  # KG-17..KG-21
            self.record_event(event(index, "operator", subtask=t, name=name, elements=elements))
