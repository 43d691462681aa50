"""The docs describe the project as it is (docs/performance.md, benchmarks/results/README.md).

Checks on files in the repository, none importing tether:

- no tracked path and no line of a tracked text file names a numbered work period ("session 9",
  "sessions 5-8", "session10/"): such labels mean nothing to a user, and git keeps the history;
- docs/performance.md stays a reference of at most 300 lines, not a log;
- every relative link in README.md and docs/*.md points at a file that exists, and a link with an
  anchor into a Markdown file at a heading that exists; every `benchmarks/...` path they name exists.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

#: "session 9", "Session-10", "session_3", "sessions 5-8", "sessions 6 and 7", "session10".
WORK_PERIOD = re.compile(r"\bsessions?[ _-]?\d", re.IGNORECASE)
PERFORMANCE_MAX_LINES = 300
#: [text](target) and ![alt](target); the target ends at whitespace or ")".
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def tracked_files() -> list[str]:
    """Paths git tracks (relative, POSIX); skips when this is not a git checkout."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [p for p in out.decode("utf-8", "replace").split("\0") if p]


def work_period_hits(name: str, text: str) -> list[str]:
    """'name:line: text' for every line of ``text`` that names a numbered work period."""
    return [f"{name}:{i}: {line.strip()[:120]}" for i, line in enumerate(text.splitlines(), 1)
            if WORK_PERIOD.search(line)]


def test_the_pattern_finds_work_periods_and_nothing_else():
    assert work_period_hits("x", "as in session 9\nSessions 5-8 measured\nresults/session10/")
    assert work_period_hits("x", "sessions 6 and 7") == ["x:1: sessions 6 and 7"]
    assert not work_period_hits("x", '@pytest.fixture(scope="session")\nrequests.Session()\nDistributedSession')


def test_no_tracked_path_names_a_work_period():
    bad = [p for p in tracked_files() if WORK_PERIOD.search(p)]
    assert not bad, "tracked paths naming a numbered work period (name them for what they hold):\n" + "\n".join(bad)


def test_no_tracked_line_names_a_work_period():
    hits: list[str] = []
    for rel in tracked_files():
        if rel == THIS:
            continue
        path = ROOT / rel
        try:
            data = path.read_bytes()
        except OSError:  # deleted in the working tree, or not a regular file
            continue
        if b"\0" in data[:8192]:  # binary (images, archives)
            continue
        hits += work_period_hits(rel, data.decode("utf-8", "replace"))
    assert not hits, ("lines naming a numbered work period (say what the thing is or measures; "
                      "git keeps the history):\n" + "\n".join(hits))


def test_performance_doc_is_a_reference_not_a_log():
    lines = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= PERFORMANCE_MAX_LINES, (
        f"docs/performance.md has {len(lines)} lines, more than {PERFORMANCE_MAX_LINES}: keep today's "
        "numbers, how to reproduce them and what each setting does; raw data goes to benchmarks/results/")


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (headings inside code fences excluded)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every relative link outside code fences."""
    found: list[tuple[int, str]] = []
    fenced = False
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for target in LINK.findall(line):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, mailto:, ...
                found.append((i, target))
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """'file:line: (target) why' for every relative link of ``path`` that does not resolve."""
    bad = []
    for lineno, target in links(path):
        file_part, _, anchor = target.partition("#")
        dest = path if not file_part else (path.parent / file_part)
        where = f"{path.relative_to(root).as_posix()}:{lineno}: ({target})"
        if not dest.exists():
            bad.append(f"{where} no such file")
        elif anchor and dest.suffix == ".md" and anchor.lower() not in anchors(dest):
            bad.append(f"{where} no heading with anchor #{anchor}")
    return bad


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "b.md").write_text("# Memory: LoRA and `x`\n\n```\n# not a heading\n```\n")
    doc = tmp_path / "a.md"
    doc.write_text("[ok](b.md) [ok](b.md#memory-lora-and-x) [web](https://x.org/y.md)\n"
                   "[gone](nope.md) [bad](b.md#not-a-heading)\n```\n[in code](nope2.md)\n```\n")
    assert broken_links(doc, root=tmp_path) == ["a.md:2: (nope.md) no such file",
                                 "a.md:2: (b.md#not-a-heading) no heading with anchor #not-a-heading"]


#: A path into benchmarks/ written in backticks, e.g. `benchmarks/results/lora/demo-learning/`.
BENCH_PATH = re.compile(r"`(benchmarks/[^`\s]+)`")


def missing_benchmark_paths(path: Path, root: Path = ROOT) -> list[str]:
    """'file: path' for every `benchmarks/...` path ``path`` names that does not exist (globs allowed),
    so renaming a results folder cannot leave the docs pointing at the old name."""
    text = path.read_text(encoding="utf-8")
    return [f"{path.relative_to(root).as_posix()}: {name}" for name in BENCH_PATH.findall(text)
            if not any(root.glob(name.rstrip("/")))]


def test_the_benchmark_path_check_finds_a_missing_folder(tmp_path):
    (tmp_path / "benchmarks" / "results" / "lora").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "lora" / "a_1.json").write_text("{}")
    doc = tmp_path / "d.md"
    doc.write_text("`benchmarks/results/lora/` `benchmarks/results/lora/a_*.json` `benchmarks/results/old9/`")
    assert missing_benchmark_paths(doc, root=tmp_path) == ["d.md: benchmarks/results/old9/"]


def test_benchmark_paths_in_the_docs_exist():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    bad = [b for doc in docs if doc.exists() for b in missing_benchmark_paths(doc)]
    assert not bad, "docs name benchmark paths that do not exist:\n" + "\n".join(bad)


def test_relative_links_in_the_docs_resolve():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    bad = [b for doc in docs if doc.exists() for b in broken_links(doc)]
    assert not bad, "broken relative links:\n" + "\n".join(bad)
