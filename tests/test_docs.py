"""Docs that cannot go stale (issue 30): what the README, docs/, the adapters' READMEs and the spec
quote about the project (rule ranges, rule IDs, file names, the hash profiles, the README's length)
is checked against spec/ and the tree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from flink_semantics.spec.area import areas
from flink_semantics.spec.areas.key_groups import HASHES
from flink_semantics.spec.rules import load_rules

REPO = Path(__file__).resolve().parent.parent
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "adapters").glob("*/README.md"),
               *(REPO / "spec").glob("*.md"), REPO / "bench" / "README.md"])
TOP = ("spec/", "reference/", "conformance/", "adapters/", "tests/", "docs/", "bench/", "examples/", ".ci/")
# Paths that stand for something (an example area `foo`, a user's package, a name to fill in).
PLACEHOLDER = re.compile(r"foo|mypkg|<(?!area>)|NAME|\*|XX")
RANGE = re.compile(r"\b([A-Z]{2,4})-(\d+)\.\.(?:\1-)?(\d+)\b")
RULE_ID = re.compile(r"\b(AIO|SRC|WM|KG|MB|SCH)-(\d+)\b")


def lines(path: Path) -> list[tuple[int, str]]:
    return list(enumerate(path.read_text(encoding="utf-8").splitlines(), start=1))


def numbers() -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for rid in load_rules():
        prefix, n = rid.split("-")
        out.setdefault(prefix, []).append(int(n))
    return out


def quoted_paths(path: Path) -> list[tuple[int, str]]:
    """The repository paths a doc quotes: in backticks, or as relative links (made relative to the root)."""
    out = []
    for no, line in lines(path):
        for m in re.finditer(r"`([^`\s]+)`|\]\(([^)\s#]+)(?:#[^)]*)?\)", line):
            if m[2] is not None:
                if m[2].startswith(("http:", "https:", "mailto:")):
                    continue
                target = (path.parent / m[2]).resolve()
                if not target.is_relative_to(REPO):
                    continue
                quoted = str(target.relative_to(REPO)) + ("/" if m[2].endswith("/") else "")
            else:
                quoted = m[1].split("::")[0]
            if quoted.startswith(TOP) and not PLACEHOLDER.search(quoted):
                out.append((no, quoted.rstrip(":,.")))
    return out


def exists(quoted: str) -> bool:
    """A path exists; one with `<area>` exists for every area (spelt with _ or -)."""
    if "<area>" not in quoted:
        return (REPO / quoted.rstrip("/")).exists()
    return all(any((REPO / quoted.replace("<area>", form)).exists() for form in (a, a.replace("_", "-")))
               for a in areas())


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_every_quoted_path_exists(doc: Path) -> None:
    missing = [f"{doc.relative_to(REPO)}:{no}: {p}" for no, p in quoted_paths(doc) if not exists(p)]
    assert missing == []


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_every_quoted_rule_and_range_exists(doc: Path) -> None:
    """Every rule ID a doc names exists; a range from a prefix's first rule ends at its last one
    (`KG-1..34` is the whole area), and any other range's ends exist."""
    known, nums = load_rules(), numbers()
    wrong = []
    for no, line in lines(doc):
        for m in RULE_ID.finditer(line):
            if m[0] not in known:
                wrong.append(f"{doc.relative_to(REPO)}:{no}: {m[0]} is no rule")
        for m in RANGE.finditer(line):
            prefix, first, last = m[1], int(m[2]), int(m[3])
            have = nums.get(prefix, [])
            if not have or first not in have or last not in have:
                wrong.append(f"{doc.relative_to(REPO)}:{no}: {m[0]}: no such rules")
            elif first == 1 and last != max(have):
                wrong.append(f"{doc.relative_to(REPO)}:{no}: {m[0]}: the rules are {prefix}-1..{max(have)}")
    assert wrong == []


def test_the_readme_areas_table_names_every_area_its_spec_and_its_wrong_adapters() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    table = text.split("<!-- areas:start -->")[1].split("<!-- areas:end -->")[0]
    nums = numbers()
    for name in areas():
        spec = f"spec/{name.replace('_', '-')}.md"
        row = next((r for r in table.splitlines() if f"]({spec})" in r), None)
        assert row is not None, f"the README's areas table has no row for {name} ({spec})"
        prefix = next(p for p in nums if any(r.file == Path(spec).name for r in load_rules().values()
                                             if r.id.startswith(p + "-")))
        assert f"{prefix}-1..{max(nums[prefix])}" in row, (name, row)
        wrong = re.search(r"`(tests/wrong_\w+\.py)`", row)
        assert wrong and (REPO / wrong[1]).exists(), row
        assert "MUTANTS" in (REPO / wrong[1]).read_text(encoding="utf-8"), wrong[1]


def test_the_hash_profiles_the_docs_name_are_the_areas() -> None:
    """Where a doc counts or lists the key groups area's hash profiles, they are HASHES."""
    words = {2: "two", 3: "three", 4: "four", 5: "five"}
    for doc in DOCS:
        for no, line in lines(doc):
            m = re.search(r"\b(two|three|four|five) hash profiles\b", line)
            if m:
                assert m[1] == words[len(HASHES)], f"{doc.relative_to(REPO)}:{no}: {line.strip()}"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    row = readme.split("key groups and rescaling")[1].splitlines()[0]
    assert re.findall(r"`(\w+)`", row.split(" profiles")[0]) == list(HASHES), row


def test_the_readme_is_read_in_five_minutes() -> None:
    """About 200 lines: the rest lives in docs/ and the adapters' READMEs."""
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 210
