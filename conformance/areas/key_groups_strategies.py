"""The strategies of the key groups area: valid schedules drawn step by step with hypothesis' own
composition (issue 32), so that shrinking can drop any single step and simplify any field.

A schedule is a configuration and a list of blocks; a block is one step, or a `burst` (elements of
two split names over the subtasks, two of a broadcast name, a checkpoint and a restore: the rare
states where split elements rotate, KG-17/KG-21, and broadcast copies are dealt out anew, KG-19),
itself a list that shrinks element by element.  Each step is its kind (`sampled_from`, the plainest
first: an update), then its fields (small `sampled_from` and `integers`).  A step that depends on
the job's state (a state name's mode, a restore refused for given causes) is drawn as a draft and
made concrete by `_Job`, which follows the configuration, the checkpoint and the restores as the
reference model does.

Refusals (with `Features.refusals`) draw their causes among every combination of KG-8's bounds,
KG-16 and KG-15 (C7 refuses a restore for the first failing check in that order); `_Job.refusal`
builds a restore that breaks exactly those where the checkpoint allows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from flink_semantics.reference.key_groups import default_max_parallelism, within_bounds
from flink_semantics.spec.adapter import unsupported
from flink_semantics.spec.areas.key_groups import (
    MANY_SUBTASKS,
    UPPER_BOUND_MAX_PARALLELISM,
    AddStateStep,
    CheckpointStep,
    KeyGroupsConfig,
    RestoreStep,
    UpdateStep,
)
from flink_semantics.spec.schedule import Schedule, Step
from hypothesis import strategies as st

AREA = "key_groups"


@dataclass(frozen=True)
class Features:
    """Which parts of the vocabulary a strategy uses."""

    spark_hash: bool = False
    pyflink_hash: bool = False  # the pyflink profile only (KG-33)
    operator_state: bool = False
    rescale: bool = False
    explicit_max: bool = True  # configurations may fix the maximum parallelism
    refusals: bool = False  # restores that break KG-8, KG-15 or KG-16, alone or together
    restore: bool = True  # checkpoints and restores at the same parallelism
    many_subtasks: bool = True  # restores to more than 16 subtasks
    lone_surrogates: bool = True  # string keys with unpaired surrogates (KG-34)
    max_steps: int = 16  # blocks: a burst counts as one

    def restrict(self, capabilities: Mapping[str, str | None], completion_order: str) -> Features:
        """These features without the ones the adapter does not support."""
        ok = lambda cap: unsupported(capabilities, f"key_groups.{cap}") is None  # noqa: E731
        return replace(self, spark_hash=self.spark_hash and ok("spark_hash"),
                       pyflink_hash=self.pyflink_hash and ok("pyflink_hash"),
                       operator_state=self.operator_state and ok("operator_state"),
                       restore=self.restore and ok("restore"),
                       many_subtasks=self.many_subtasks and ok("many_subtasks"),
                       lone_surrogates=self.lone_surrogates and ok("lone_surrogates"),
                       rescale=self.rescale and ok("rescale") and ok("restore"))


# Keys: small ints and longs (so that keys repeat and sums grow), extremes, and strings of every
# width (empty, ASCII of every length modulo 4, Latin-1, CJK, astral-plane), and (KG-34) strings with
# unpaired surrogates, "?" (what Spark makes of one, KG-26) and a pair written as two code points
# (the step holds its character, "\U0001F600").
PLAIN_STRINGS = ("", "a", "ab", "abc", "abcd", "abcde", "é", "héllo", "日本", "\U0001F600", "x\U0001F600y",
                 "ÿÿÿ", "key-42", "?", "\ud83d\ude00")
LONE_STRINGS = ("\ud800", "a\udfffé", "\udc00\ud800")
STRINGS = PLAIN_STRINGS + LONE_STRINGS
# one to four UTF-8 bytes, one or two UTF-16 units; the two surrogates pair when they meet in that order
PLAIN_CHARS = "aZ0 -é\u00ff\u0100日\uffff\U0001F600\U00010000"
CHARS = PLAIN_CHARS + "\ud800\udc00"
INT_KEYS = (0, 1, 2, 3, 7, -1, 42, 2**31 - 1, -(2**31))
LONG_KEYS = (0, 1, 7, -1, 2**32, 2**32 + 1, 2**63 - 1, -(2**63), 123456789012)
TYPES = ("int", "long", "string")
NAMES = ("a", "b", "c", "d")
MODES = ("split", "union", "broadcast")  # a name's first add_state fixes its mode
# C7's checks, and every combination of them a refused restore is drawn to break
CAUSES = (("KG-8",), ("KG-16",), ("KG-15",), ("KG-16", "KG-15"), ("KG-8", "KG-16"), ("KG-8", "KG-15"),
          ("KG-8", "KG-16", "KG-15"))
OUT_OF_BOUNDS = UPPER_BOUND_MAX_PARALLELISM + 7232  # 40000: above KG-8's bound, needs no many subtasks


# --------------------------------------------------------------------------
# Drafts: steps whose concrete form depends on the job's state
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class AddDraft:
    subtask: int
    name: str
    element: int
    mode: str  # the name's mode, unless an earlier add_state fixed another


@dataclass(frozen=True)
class RestoreDraft:
    pick: int  # of (1, 2, 3, 4, 6, min(maxP, 16), maxP)
    large: bool  # above 16 subtasks allowed (else 5)


@dataclass(frozen=True)
class RefusalDraft:
    causes: tuple[str, ...]
    variant: int  # which of the restores that break those causes


@dataclass(frozen=True)
class BurstDraft:
    split: tuple[int, ...]  # element j on subtask j, of the two split names in turn
    broadcast: tuple[int, ...]  # element j on subtask j of a broadcast name


Draft = Step | AddDraft | RestoreDraft | RefusalDraft | BurstDraft


# --------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------


TEXT = object()  # a key table's entry for a string drawn character by character

# One draw picks a key and its type (few choices per step, so that the shrinker can delete a step
# whole): ints, longs and strings about a third each, one key in about thirty null, a string drawn
# character by character now and then.  The first entry, the int 0, is the plainest.
NULLS = ((None, "int"), (None, "long"), (None, "string"))
TEXTS = ((TEXT, "string"),) * 6


def _key_table(strings: tuple[str, ...]) -> tuple[tuple[Any, str], ...]:
    return (*((k, "int") for k in INT_KEYS * 2), *((k, "long") for k in LONG_KEYS * 2),
            *((k, "string") for k in strings), *TEXTS, *NULLS)


KEY_TABLE, PLAIN_KEY_TABLE = _key_table(STRINGS), _key_table(PLAIN_STRINGS)


# @cache on a strategy factory: one strategy object per arguments, since hypothesis validates each
# new object it draws from (a third to a half of the draw's time).
@cache
@st.composite
def keys(draw: Any, lone_surrogates: bool = True) -> tuple[int | str | None, str]:
    """A key and its type; strings with unpaired surrogates only when `lone_surrogates`."""
    key, type_ = draw(st.sampled_from(KEY_TABLE if lone_surrogates else PLAIN_KEY_TABLE))
    if key is TEXT:
        alphabet = CHARS if lone_surrogates else PLAIN_CHARS
        return "".join(draw(st.lists(st.sampled_from(alphabet), max_size=5))), type_
    return key, type_


@cache
@st.composite
def configs(draw: Any, f: Features) -> KeyGroupsConfig:
    parallelism = draw(st.sampled_from((1, 2, 3, 4, 5, 8)))
    max_p = None
    if f.explicit_max and draw(st.booleans()):
        max_p = draw(st.sampled_from([m for m in (parallelism, 8, 10, 16, 128) if m >= parallelism]))
    if f.pyflink_hash:
        return KeyGroupsConfig(parallelism, max_p, "pyflink")
    return KeyGroupsConfig(parallelism, max_p, "spark" if f.spark_hash and draw(st.booleans()) else "flink")


@cache
@st.composite
def updates(draw: Any, f: Features) -> UpdateStep:
    key, type_ = draw(keys(f.lone_surrogates))
    return UpdateStep(key, type_, draw(st.integers(1, 5)))


NAME_MODES = tuple((n, m) for m in ("split", "split", "union", "broadcast") for n in NAMES)


@cache
@st.composite
def adds(draw: Any) -> AddDraft:
    name, mode = draw(st.sampled_from(NAME_MODES))  # one draw: a name and its mode (if first)
    return AddDraft(draw(st.integers(0, 9)), name, draw(st.integers(0, 99)), mode)


@cache
@st.composite
def restores(draw: Any, f: Features, config: KeyGroupsConfig) -> Draft:
    """A restore: at the configured parallelism without rescaling; else at a drawn one, or (with
    refusals, one in three) one refused for a drawn combination of causes."""
    if not f.rescale:
        return RestoreStep(config.parallelism, None)
    if f.refusals and draw(st.integers(0, 2)) == 2:
        return RefusalDraft(draw(st.sampled_from(CAUSES)), draw(st.integers(0, 2)))
    return RestoreDraft(draw(st.integers(0, 6)), draw(st.integers(0, 3)) == 3)


@cache
@st.composite
def bursts(draw: Any, f: Features, config: KeyGroupsConfig) -> list[Draft]:
    """Elements of two split names dealt over the first subtasks, two of a broadcast name, a
    checkpoint and a restore (`_Job.burst_adds` picks the names the modes allow)."""
    split = draw(st.lists(st.integers(0, 99), min_size=2, max_size=7))
    broadcast = draw(st.lists(st.integers(0, 99), max_size=2))
    return [BurstDraft(tuple(split), tuple(broadcast)), CheckpointStep(), draw(restores(f, config))]


def _kinds(f: Features) -> tuple[str, ...]:
    """Step kinds, weighted by repetition (an update first: the plainest step)."""
    kinds: tuple[str, ...] = ("update",) * 20
    if f.operator_state:
        kinds += ("add",) * 7
    if f.restore:
        kinds += ("checkpoint",) * 4 + ("restore",) * 8
    if f.operator_state and f.rescale:
        kinds += ("burst",) * 3
    return kinds


@cache
@st.composite
def blocks(draw: Any, f: Features, config: KeyGroupsConfig) -> list[Draft]:
    """One step, or a burst's steps."""
    kind = draw(st.sampled_from(_kinds(f)))
    if kind == "update":
        return [draw(updates(f))]
    if kind == "add":
        return [draw(adds())]
    if kind == "checkpoint":
        return [CheckpointStep()]
    if kind == "restore":
        return [draw(restores(f, config))]
    return draw(bursts(f, config))


@cache
@st.composite
def schedules(draw: Any, f: Features) -> Schedule:
    """A valid key groups schedule using the features."""
    config = draw(configs(f))
    drafted = draw(st.lists(blocks(f, config), min_size=1, max_size=f.max_steps))
    job = _Job(config, f)
    return Schedule(AREA, config, tuple(s for block in drafted for d in block for s in job.resolve(d)))


# --------------------------------------------------------------------------
# The job's state, as the reference model follows it (KG-9, KG-16, C7)
# --------------------------------------------------------------------------


class _Job:
    """Parallelism, maximum parallelism, the checkpoint's maximum and the names' modes after each
    step: what a draft needs to become a valid step breaking what it says."""

    def __init__(self, config: KeyGroupsConfig, f: Features):
        self.config, self.f = config, f
        self.parallelism = config.parallelism
        self.max_parallelism = config.max_parallelism or default_max_parallelism(config.parallelism)
        self.checkpoint: int | None = None  # its maximum parallelism
        self.modes: dict[str, str] = {}

    def resolve(self, d: Draft) -> list[Step]:
        """The steps of a draft, applied to the job."""
        if isinstance(d, BurstDraft):
            steps: list[Step] = self.burst_adds(d)
        elif isinstance(d, AddDraft):
            steps = [AddStateStep(d.subtask, d.name, d.element, self.modes.setdefault(d.name, d.mode))]
        elif isinstance(d, RestoreDraft):
            steps = [self.rescale(d)]
        elif isinstance(d, RefusalDraft) and self.checkpoint is None and d.causes != ("KG-8",):
            return self.resolve(CheckpointStep()) + self.resolve(d)  # KG-16 and KG-15 need a checkpoint
        elif isinstance(d, RefusalDraft):
            steps = [self.refusal(d)]
        else:
            steps = [d]
        for s in steps:
            self.apply(s)
        return steps

    def apply(self, s: Step) -> None:
        if isinstance(s, CheckpointStep):
            self.checkpoint = self.max_parallelism
        elif isinstance(s, RestoreStep) and not self.causes(s):
            if self.checkpoint is not None:
                self.max_parallelism = self.checkpoint  # KG-16
            else:
                self.max_parallelism = s.max_parallelism or default_max_parallelism(s.parallelism)
            self.parallelism = s.parallelism

    def causes(self, s: RestoreStep) -> tuple[str, ...]:
        """The checks of C7 a restore fails."""
        c, out = self.checkpoint, []
        if not within_bounds(s.parallelism, s.max_parallelism):
            out.append("KG-8")
        if c is not None and s.max_parallelism is not None and s.max_parallelism != c:
            out.append("KG-16")
        if c is not None and s.parallelism > c:
            out.append("KG-15")
        return tuple(out)

    def burst_adds(self, d: BurstDraft) -> list[Step]:
        splits = [x for x in NAMES if self.modes.get(x, "split") == "split"][:2]
        broadcast = [x for x in NAMES if self.modes.get(x) == "broadcast"] or \
            [x for x in NAMES if x not in self.modes and x not in splits]
        steps: list[Step] = []
        for j, element in enumerate(d.split if splits else ()):
            name = splits[j % len(splits)]
            steps.append(AddStateStep(j, name, element, self.modes.setdefault(name, "split")))
        for j, element in enumerate(d.broadcast if broadcast else ()):
            mode = self.modes.setdefault(broadcast[0], "broadcast")
            steps.append(AddStateStep(j, broadcast[0], element, mode))
        return steps

    def rescale(self, d: RestoreDraft) -> RestoreStep:
        """Up and down, to 1 and to the maximum parallelism; to more than 16 subtasks only now and
        then (a restore lists every subtask's range and operator state, so a large one is costly)."""
        max_p = self.config.max_parallelism or 128
        p = (1, 2, 3, 4, 6, min(max_p, MANY_SUBTASKS), max_p)[d.pick]
        if p > MANY_SUBTASKS and not (d.large and self.f.many_subtasks):
            p = 5
        return RestoreStep(p, None)

    def refusal(self, d: RefusalDraft) -> RestoreStep:
        """A restore that breaks the draft's causes (`resolve` takes a checkpoint first where they need
        one); a parallelism above the checkpoint's maximum that would need many subtasks the
        adapter lacks is taken out of bounds instead (KG-8 then joins the causes)."""
        m = self.checkpoint
        if m is None:  # KG-8 alone
            return RestoreStep(*((0, None), (1, OUT_OF_BOUNDS), (2, 1))[d.variant])
        other = 2 * m if 2 * m <= UPPER_BOUND_MAX_PARALLELISM else m // 2  # a changed maximum (KG-16)
        above = m + 1  # KG-15
        if above > MANY_SUBTASKS and not self.f.many_subtasks or above > UPPER_BOUND_MAX_PARALLELISM:
            above = OUT_OF_BOUNDS
        causes = set(d.causes)
        if causes == {"KG-8"}:
            return RestoreStep(0, (None, m, None)[d.variant])
        if causes == {"KG-16"}:
            return RestoreStep(1, other)
        if causes == {"KG-15"}:
            return RestoreStep(above, None)
        if causes == {"KG-16", "KG-15"}:
            return RestoreStep(above, other)
        if causes == {"KG-8", "KG-16"}:
            return RestoreStep(*((1, OUT_OF_BOUNDS), (0, other), (2, 1) if m > 1 else (0, other))[d.variant])
        if causes == {"KG-8", "KG-15"}:
            if above != OUT_OF_BOUNDS and d.variant:
                return RestoreStep(above, m)  # above its own explicit maximum too
            return RestoreStep(OUT_OF_BOUNDS, None)
        return RestoreStep(OUT_OF_BOUNDS, other)
