"""check-series (every prefix of a series builds) on a tiny CMake tree, and the generated patch table."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ridgefill.upstream import series_check, series_doc, tree as upstream

GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
CMAKE = "cmake_minimum_required(VERSION 3.16)\nproject(t C)\nadd_executable(hello main.c)\n"
MAIN = "int main(void) {\n    return 0;\n}\n"

PATCH = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: t <t@t>
Date: Fri, 4 Dec 2026 00:00:00 +0000
Subject: [PATCH] graph : a subject long enough that git folds it over two
 lines of the header

First paragraph, which says
what the patch does.

Second paragraph: why.
---
 src/a.c | 1 +
 1 file changed, 1 insertion(+)

diff --git a/src/a.c b/src/a.c
index 1111111..2222222 100644
--- a/src/a.c
+++ b/src/a.c
@@ -1 +1,2 @@
 int a;
+int b;
--
2.39.5
"""


def test_describe_reads_subject_first_paragraph_and_files(tmp_path):
    p = tmp_path / "0001-x.patch"
    p.write_text(PATCH)
    subject, first, files = series_doc.describe(p)
    assert subject == "graph : a subject long enough that git folds it over two lines of the header"
    assert first == "First paragraph, which says what the patch does."
    assert files == ["src/a.c"]
    table = series_doc.series_markdown([p])
    assert "| 1 | `graph : a subject long enough" in table and "`src/a.c`" in table


def test_the_summary_counts_patches_lines_and_the_context_file(tmp_path):
    p = tmp_path / "0001-x.patch"
    p.write_text(PATCH)
    ctx = tmp_path / "0002-y.patch"
    ctx.write_text(PATCH.replace("src/a.c", "src/llama-context.cpp"))
    assert series_doc.changed_lines(p) == series_doc.changed_lines(p, "src/a.c") > 0
    assert series_doc.changed_lines(p, "src/llama-context.cpp") == 0
    n = series_doc.changed_lines(p)
    assert series_doc.summary([p, ctx]) == (f"2 patches, {2 * n} changed lines; the largest that only edits files changes "
                                            f"{n} lines (patch 1); the series changes {n} lines of `src/llama-context.cpp`.")


def test_no_doc_quotes_a_patch_count_of_its_own():
    """The series' counts live in the generated section of docs/series.md; other pages link it, so no count drifts
    (a count in a sentence about the past, 'the 25 patches before ...', names its time)."""
    import re

    root = Path(__file__).resolve().parents[1]
    for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        text = page.read_text()
        if page.name == "series.md":
            text = text.split(series_doc.DOC_BEGIN)[0] + text.split(series_doc.DOC_END)[1]
        for m in re.finditer(r"\b(\d+)[- ]patch(es)?\b", text):
            line = text[text.rfind("\n", 0, m.start()) + 1 : text.find("\n", m.end())]
            assert re.search(r"\b(before|then|at the time|was|were|of the \d{4}|session)\b", line), \
                f"{page.name} quotes a patch count: {line.strip()[:120]}"


def test_update_doc_rewrites_only_the_generated_section(tmp_path):
    p = tmp_path / "0001-x.patch"
    p.write_text(PATCH)
    doc = tmp_path / "series.md"
    doc.write_text(f"# head\n\n{series_doc.DOC_BEGIN}\nold table\n{series_doc.DOC_END}\n\ntail\n")
    assert series_doc.update_doc(doc, [p])
    text = doc.read_text()
    assert text.startswith("# head\n") and text.endswith("\ntail\n") and "old table" not in text
    assert "First paragraph" in text
    assert not series_doc.update_doc(doc, [p])  # already current
    doc.write_text("no markers\n")
    with pytest.raises(upstream.UpstreamError, match="no generated series section"):
        series_doc.update_doc(doc, [p])


def test_docs_series_table_is_current():
    doc = series_doc.doc_path().read_text()
    assert series_doc.series_markdown(upstream.series()) in doc, "run `ridgefill upstream series-doc`"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=GIT_ENV).stdout


def _series(tmp_path: Path, mains: list[str]) -> tuple[Path, list[Path]]:
    """A base tree (CMakeLists + main.c) and one patch per entry of `mains` (main.c's text after it)."""
    src = tmp_path / "src"
    src.mkdir(parents=True)
    (src / "CMakeLists.txt").write_text(CMAKE)
    (src / "main.c").write_text(MAIN)
    work = tmp_path / "work"
    upstream.unpack_base(work, src, "base")
    for i, text in enumerate(mains, 1):
        (work / "main.c").write_text(text)
        _git(work, "commit", "-qam", f"main : step {i}")
    out = tmp_path / "patches"
    _git(work, "format-patch", "-q", "-o", str(out), "upstream..HEAD")
    return src, sorted(out.glob("*.patch"))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("cc") is None, reason="needs cmake and a C compiler")
def test_check_series_names_the_first_patch_that_does_not_build(tmp_path):
    good = "int f(void) { return 1; }\n" + MAIN
    broken = "int f(void) { return 1 }\n" + MAIN  # missing ';'
    fixed = "int f(void) { return 2; }\n" + MAIN
    src, patches = _series(tmp_path, [good, broken, fixed])
    base = lambda tree: upstream.unpack_base(tree, src, "base")  # noqa: E731
    log = []
    with pytest.raises(series_check.SeriesBroken, match="0002-main-step-2.patch is the first patch that does not build"):
        series_check.check(patches, tmp_path / "check", jobs=1, progress=log.append, make_base=base,
                           standalone=True, targets=("hello",))
    assert any("[1/3]" in l and "builds" in l for l in log) and any("[2/3]" in l and "DOES NOT BUILD" in l for l in log)

    # a series whose every prefix builds passes, reusing the same tree and build folder
    src2, ok = _series(tmp_path / "ok", [good, fixed])
    steps = series_check.check(ok, tmp_path / "check2", jobs=1, progress=log.append,
                               make_base=lambda tree: upstream.unpack_base(tree, src2, "base"), standalone=True,
                               targets=("hello",))
    assert [s.ok for s in steps] == [True, True, True] and steps[0].patch == "upstream"
