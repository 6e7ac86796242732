"""The key groups and rescaling area (spec/key-groups.md): configuration, steps, events, capabilities,
notation.

One keyed operator: `parallelism` subtasks, `max_parallelism` key groups (explicit, or the default
of KG-9), a hash profile (`flink`: the JDK hash code then Flink's murmur finalizer; `spark`: Spark's
`hash()`).  Keyed records update a per-key sum on the subtask their key group belongs to; operator
(non-keyed) list state is added per subtask under a name and a mode (split, union, broadcast);
checkpoints snapshot both; a restore starts the job again from the latest checkpoint at a new
parallelism, redistributing the state.

Standard library and `spec` only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from flink_semantics.spec.area import Area, Mark, Notation, Timeline, int_list, numbered, template_renderer
from flink_semantics.spec.schedule import MARKER, OUTPUT, Event, EventKind, Schedule, ScheduleError, Step

LOWER_BOUND_MAX_PARALLELISM = 1 << 7  # 128
UPPER_BOUND_MAX_PARALLELISM = 1 << 15  # 32768
HASHES = ("flink", "spark", "pyflink")
KEY_TYPES = ("int", "long", "string")
MODES = ("split", "union", "broadcast")
MANY_SUBTASKS = 16  # a parallelism above this needs key_groups.many_subtasks
INT_RANGE = (-(2**31), 2**31 - 1)
LONG_RANGE = (-(2**63), 2**63 - 1)


def utf16_string(s: str) -> str:
    """KG-34: a string key is its UTF-16 code units; as a Python str, the one whose surrogate pairs
    are combined (a pair given as two code points, '\\ud83d\\ude00', is the character it encodes,
    '😀', as JSON decoding gives it), unpaired surrogates kept as they are."""
    return s.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")


def has_lone_surrogate(key: object) -> bool:
    """KG-34: a string key holding an unpaired surrogate, a UTF-16 unit without a UTF-8 form."""
    return isinstance(key, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in utf16_string(key))

# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyGroupsConfig:
    """`parallelism`: the operator's subtasks at the start.
    `max_parallelism`: the number of key groups, configured explicitly; null: the default of KG-9.
    `hash`: the hash profile, `flink` (KG-1, KG-11), `spark` (KG-22..KG-28) or `pyflink` (KG-33: the
    key PyFlink's `key_by` routes by, a one-field Row).
    Bounds are the operator's to enforce (KG-8): a configuration outside them is refused."""

    parallelism: int = 1
    max_parallelism: int | None = None
    hash: str = field(default="flink", metadata={"choices": HASHES})


def validate_config(c: KeyGroupsConfig) -> None:
    """KG-8, a rejecting rule: the operator refuses a configuration out of bounds (its trace is the
    single `rejected` event)."""
    p, m = c.parallelism, c.max_parallelism
    if not 0 < p <= UPPER_BOUND_MAX_PARALLELISM or (
            m is not None and not (0 < m <= UPPER_BOUND_MAX_PARALLELISM and p <= m)):
        raise ScheduleError(None, "KG-8", f"parallelism {p} and max parallelism {m} are not within bounds: "
                            f"0 < parallelism <= max parallelism <= {UPPER_BOUND_MAX_PARALLELISM}")


# --------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class UpdateStep(Step):
    """A keyed record: `value` is added to the state of `key` (a sum, 0 before the first), on the
    subtask that owns the key's key group (KG-6).  `key` is typed by `type`: a 32-bit `int`, a
    64-bit `long` or a `string`; null is a null key (KG-7)."""

    op: ClassVar[str] = "update"
    key: int | str | None
    type: str = field(default="int", metadata={"choices": KEY_TYPES})
    value: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.key, str):  # KG-34: one form per key, the one its JSON form decodes to
            object.__setattr__(self, "key", utf16_string(self.key))


@dataclass(frozen=True)
class AddStateStep(Step):
    """Subtask `subtask mod parallelism` appends `element` to its operator list state `name`, kept
    in `mode` (split: `getListState`, union: `getUnionListState`, broadcast: broadcast state)."""

    op: ClassVar[str] = "add_state"
    subtask: int = field(metadata={"min": 0})
    name: str
    element: int
    mode: str = field(default="split", metadata={"choices": MODES})


@dataclass(frozen=True)
class CheckpointStep(Step):
    """A checkpoint completes: the keyed state of every subtask (with its key-group range) and its
    operator state are the state the next restore starts from."""

    op: ClassVar[str] = "checkpoint"


@dataclass(frozen=True)
class RestoreStep(Step):
    """The job stops and starts again from the latest checkpoint (no checkpoint: from empty state)
    with `parallelism` subtasks; `max_parallelism`: the new job's explicitly configured maximum
    parallelism, or null when it configures none (KG-16)."""

    op: ClassVar[str] = "restore"
    parallelism: int
    max_parallelism: int | None = None


STEPS = (UpdateStep, AddStateStep, CheckpointStep, RestoreStep)


def validate_steps(schedule: Schedule) -> None:
    """KG-32: a key fits its type; an operator state name keeps one mode."""
    modes: dict[str, str] = {}
    for i, s in enumerate(schedule.steps):
        if isinstance(s, UpdateStep) and s.key is not None:
            if s.type == "string" and not isinstance(s.key, str):
                raise ScheduleError(i, "KG-32", f"a string key must be a string, not {s.key!r}", s.op)
            if s.type in ("int", "long"):
                low, high = INT_RANGE if s.type == "int" else LONG_RANGE
                if not isinstance(s.key, int) or not low <= s.key <= high:
                    article = "an" if s.type == "int" else "a"
                    raise ScheduleError(i, "KG-32", f"{s.key!r} is not {article} {s.type} key", s.op)
        elif isinstance(s, AddStateStep):
            if modes.setdefault(s.name, s.mode) != s.mode:
                raise ScheduleError(i, "KG-32", f"state {s.name!r} is {modes[s.name]} state, not {s.mode}",
                                    s.op)


# --------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------

EVENTS = (
    # An update: the key's hash (the profile's), key group, subtask and the key's sum there afterwards.
    EventKind("routed", ("key", "type", "hash", "key_group", "subtask", "value"), OUTPUT),
    EventKind("null_key", (), MARKER),  # an update with a null key refused (KG-7)
    EventKind("restored", ("parallelism", "max_parallelism"), MARKER),
    EventKind("restore_refused", ("reason",), MARKER),  # the running job goes on unchanged
    EventKind("range", ("subtask", "first", "last"), MARKER),  # after a restore, per new subtask
    EventKind("keyed", ("subtask", "key_group", "key", "type", "value"), MARKER),  # restored keyed state
    EventKind("operator", ("subtask", "name", "elements"), MARKER),  # restored operator state
)

# The reasons of restore_refused
REFUSED_PARALLELISM = "parallelism out of bounds"  # KG-8
REFUSED_ABOVE_MAX = "parallelism above the checkpoint's max parallelism"  # KG-15
REFUSED_MAX_CHANGED = "max parallelism changed"  # KG-16
REASONS = (REFUSED_PARALLELISM, REFUSED_ABOVE_MAX, REFUSED_MAX_CHANGED)

# --------------------------------------------------------------------------
# Capabilities
# --------------------------------------------------------------------------

CAPABILITIES = {
    "key_groups.spark_hash": "the `spark` hash profile: Spark's hash() (KG-22..KG-28)",
    "key_groups.pyflink_hash": "the `pyflink` hash profile: PyFlink's key_by, by a one-field Row (KG-33)",
    "key_groups.operator_state": "operator (non-keyed) list state: split, union, broadcast (KG-17..KG-21)",
    "key_groups.restore": "checkpoints, and restores at the same parallelism, configuring no maximum (KG-14)",
    "key_groups.many_subtasks": f"a parallelism above {MANY_SUBTASKS}, up to the bound of KG-8 (an engine "
                                "that runs a subtask per unit of parallelism may not have them)",
    "key_groups.rescale": "restores at another parallelism or with a maximum parallelism (KG-13, KG-15, "
                          "KG-16); needs key_groups.restore",
    "key_groups.lone_surrogates": "string keys holding an unpaired surrogate, a UTF-16 code unit that has "
                                  "no UTF-8 form (KG-34)",
}


def validate_ok(c: KeyGroupsConfig) -> bool:
    try:
        validate_config(c)
    except ScheduleError:
        return False
    return True


def required_capabilities(schedule: Schedule) -> frozenset[str]:
    c: KeyGroupsConfig = schedule.config
    caps = set()
    if c.hash == "spark":
        caps.add("key_groups.spark_hash")
    elif c.hash == "pyflink":
        caps.add("key_groups.pyflink_hash")
    parallelism = c.parallelism
    if parallelism > MANY_SUBTASKS and validate_ok(c):
        caps.add("key_groups.many_subtasks")
    for s in schedule.steps:
        if isinstance(s, UpdateStep) and s.type == "string" and has_lone_surrogate(s.key):
            caps.add("key_groups.lone_surrogates")
        if isinstance(s, AddStateStep):
            caps.add("key_groups.operator_state")
        elif isinstance(s, (CheckpointStep, RestoreStep)):
            caps.add("key_groups.restore")
        if isinstance(s, RestoreStep):
            if s.parallelism != parallelism or s.max_parallelism is not None:
                caps.add("key_groups.rescale")  # another parallelism, or key groups configured anew
            if MANY_SUBTASKS < s.parallelism <= UPPER_BOUND_MAX_PARALLELISM:
                caps.add("key_groups.many_subtasks")
    return frozenset(caps)


# --------------------------------------------------------------------------
# Notation of the examples (spec/key-groups.md, "Notation used in the examples")
# --------------------------------------------------------------------------

_CONFIG_ITEM = re.compile(r"(\w+)=([^\s=]+)")
_KEY = re.compile(r'(null|-?\d+L?|"(?:[^"\\]|\\.)*")')


def parse_config(text: str) -> dict[str, Any]:
    """`parallelism=3 max_parallelism=128 hash=spark`."""
    out: dict[str, Any] = {}
    for key, value in _CONFIG_ITEM.findall(text):
        if key in out:
            raise ValueError(f"{key} is given twice")
        if key in ("parallelism", "max_parallelism"):
            out[key] = int(value)
        elif key == "hash":
            out[key] = value
        else:
            raise ValueError(f"unknown configuration item {key}={value}")
    return out


def parse_key(text: str) -> tuple[int | str | None, str]:
    """A key and its type: `7` (int), `7L` (long), `"a"` (string, JSON-quoted), `null`."""
    if text == "null":
        return None, "int"
    if text.startswith('"'):
        return json.loads(text), "string"
    if text.endswith("L"):
        return int(text[:-1]), "long"
    return int(text), "int"


def key_text(key: int | str | None, type_: str) -> str:
    if key is None:
        return "null"
    if type_ == "string":  # an unpaired surrogate as its JSON escape (it has no UTF-8 form: KG-34)
        return "".join(f"\\u{ord(c):04x}" if 0xD800 <= ord(c) <= 0xDFFF else c
                       for c in json.dumps(utf16_string(str(key)), ensure_ascii=False))
    return f"{key}L" if type_ == "long" else str(key)


def _split_key(rest: str) -> tuple[str, list[str]]:
    """The first word, a key that may be a quoted string with spaces, and the words after it."""
    m = _KEY.match(rest)
    if not m:
        raise ValueError(f"expected a key (7, 7L, \"a\" or null), not {rest!r}")
    return m.group(1), rest[m.end():].split()


def parse_step(text: str) -> dict[str, Any]:
    """`update 7`, `update "a" 5`, `update 7L`, `update null`, `add_state t1 offsets 4 union`,
    `checkpoint`, `restore 3`, `restore 3 max=256`."""
    op, _, rest = text.strip().partition(" ")
    if op == "update":
        word, args = _split_key(rest)
        key, type_ = parse_key(word)
        if len(args) > 1:
            raise ValueError(f"update takes a key and an optional value: {text!r}")
        d: dict[str, Any] = {"op": op, "key": key, "type": type_}
        if args:
            d["value"] = int(args[0])
        return d
    words = rest.split()
    if op == "add_state" and len(words) in (3, 4) and words[0].startswith("t"):
        d = {"op": op, "subtask": int(words[0][1:]), "name": words[1], "element": int(words[2])}
        if len(words) == 4:
            d["mode"] = words[3]
        return d
    if op == "checkpoint" and not words:
        return {"op": op}
    if op == "restore" and len(words) in (1, 2):
        d = {"op": op, "parallelism": int(words[0])}
        if len(words) == 2:
            if not words[1].startswith("max="):
                raise ValueError(f"expected max=N, not {words[1]!r}")
            d["max_parallelism"] = int(words[1][4:])
        return d
    raise ValueError(f"not a step of the notation: {text!r}")


def parse_event(step: int, text: str) -> Event:
    """`routed 7 hash=… kg=… t1 sum=3`, `null_key`, `restored 3 max=128`, `refused <reason>`,
    `range t0 0 42`, `keyed t0 kg=17 7 sum=3`, `operator t1 offsets [1, 2]`."""
    kind, _, rest = text.strip().partition(" ")
    if kind == "routed":
        word, args = _split_key(rest)
        key, type_ = parse_key(word)
        fields = dict(a.split("=", 1) for a in args if "=" in a)
        subtask = [a for a in args if a.startswith("t")]
        if set(fields) != {"hash", "kg", "sum"} or len(subtask) != 1:
            raise ValueError(f"routed takes a key, hash=, kg=, a subtask and sum=: {text!r}")
        return event(step, kind, key=key, type=type_, hash=int(fields["hash"]), key_group=int(fields["kg"]),
                     subtask=int(subtask[0][1:]), value=int(fields["sum"]))
    if kind == "keyed":
        words = rest.split(maxsplit=2)
        word, args = _split_key(words[2])
        key, type_ = parse_key(word)
        if not (words[0].startswith("t") and words[1].startswith("kg=") and len(args) == 1
                and args[0].startswith("sum=")):
            raise ValueError(f"keyed takes a subtask, kg=, a key and sum=: {text!r}")
        return event(step, kind, subtask=int(words[0][1:]), key_group=int(words[1][3:]), key=key,
                     type=type_, value=int(args[0][4:]))
    words = rest.split()
    if kind == "null_key" and not words:
        return event(step, kind)
    if kind == "restored" and len(words) == 2 and words[1].startswith("max="):
        return event(step, kind, parallelism=int(words[0]), max_parallelism=int(words[1][4:]))
    if kind == "refused" and rest.strip() in REASONS:
        return event(step, "restore_refused", reason=rest.strip())
    if kind == "range" and len(words) == 3 and words[0].startswith("t"):
        return event(step, kind, subtask=int(words[0][1:]), first=int(words[1]), last=int(words[2]))
    if kind == "operator" and len(words) >= 3 and words[0].startswith("t"):
        return event(step, kind, subtask=int(words[0][1:]), name=words[1],
                     elements=int_list(" ".join(words[2:])))
    if kind == "rejected":
        return event(step, kind, reason="")
    raise ValueError(f"not a trace event of the notation: {text!r}")


def _text(name: str, value: Any) -> str:
    if name == "subtask":
        return f"t{value}"
    if name == "elements":
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


_EVENT_FORMATS = {
    "null_key": "null_key",
    "restored": "restored {parallelism} max={max_parallelism}",
    "restore_refused": "refused {reason}",
    "range": "range {subtask} {first} {last}",
    "operator": "operator {subtask} {name} {elements}",
    "rejected": "rejected",
}
_render_simple = template_renderer(_EVENT_FORMATS, _text)


def render_event(e: Event) -> str:
    """An event in the notation, with its step: the inverse of parse_event."""
    if e.event == "routed":
        return (f"@{e.step} routed {key_text(e.key, e.type)} hash={e.hash} kg={e.key_group} "
                f"t{e.subtask} sum={e.value}")
    if e.event == "keyed":
        return f"@{e.step} keyed t{e.subtask} kg={e.key_group} {key_text(e.key, e.type)} sum={e.value}"
    return _render_simple(e)


# --------------------------------------------------------------------------
# The counterexample timeline (conformance/draw.py): keys in, key groups and subtasks out
# --------------------------------------------------------------------------


def _key_text(key: int | str | None) -> str:
    return json.dumps(key)  # 7, "a", null


def _step_lanes(schedule: Schedule) -> list[str]:
    """An update on its key's lane, operator state added on its state's, the rest on the job's."""
    out = []
    for s in schedule.steps:
        if isinstance(s, UpdateStep):
            out.append(numbered("key", _key_text(s.key)))
        elif isinstance(s, AddStateStep):
            out.append(f"state {s.name}")
        else:
            out.append("job")
    return out


def _event_lane(schedule: Schedule, e: Event) -> str:
    """A routed update and restored keyed state on their key group's lane; a subtask's range and
    operator state on the subtask's; the rest on the job's."""
    if e.event in ("routed", "keyed"):
        return numbered("key group", e.key_group)
    return numbered("subtask", e.subtask) if e.event in ("range", "operator") else "job"


TIMELINE = Timeline(
    step_lanes=_step_lanes,
    event_lane=_event_lane,
    step_marks={"update": Mark.RECORD, "checkpoint": Mark.CHECKPOINT, "restore": Mark.RESTORE},
    event_marks={"routed": Mark.OUTPUT, "null_key": Mark.FAILURE, "restored": Mark.RESTORE,
                 "restore_refused": Mark.FAILURE},
)


# --------------------------------------------------------------------------
# The descriptor
# --------------------------------------------------------------------------

AREA = Area(
    name="key_groups",
    title="key groups and rescaling",
    rules_file="key-groups.md",
    rule_prefix="KG",
    config_type=KeyGroupsConfig,
    steps=STEPS,
    events=EVENTS,
    capabilities=CAPABILITIES,
    notation=Notation(parse_config, parse_step, parse_event, render_event),
    validate_config=validate_config,
    validate_steps=validate_steps,
    required_capabilities=required_capabilities,
    rejecting_rules=("KG-8",),
    timeline=TIMELINE,
)
event = AREA.event
