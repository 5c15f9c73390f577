"""`rebase`: the patch series moved to another upstream, on tiny git trees (no sdist, no network)."""

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from ridgefill.cli import commands as cli
from ridgefill import fetch
from ridgefill import paths
from ridgefill.upstream import cli as upstream_cli
from ridgefill.upstream import tree as upstream
from ridgefill.upstream import rebase as rb

GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
A = [f"int a_{i} = {i};" for i in range(1, 41)]  # src/a.c, line i is A[i - 1]
B = ["#pragma once", "", "int b(void);", "int b2(void);", ""]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=GIT_ENV).stdout


def write_tree(root: Path, a: list[str] = A, b: list[str] = B, readme: str = "llama\nold readme line\n") -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.c").write_text(lines(*a))
    (root / "src" / "b.h").write_text(lines(*b))
    (root / "README").write_text(readme)
    return root


def edit(lines: list[str], **changes: str) -> list[str]:
    """`lines` with line N (1-based, keyword `l<N>`) replaced."""
    out = list(lines)
    for key, text in changes.items():
        out[int(key[1:]) - 1] = text
    return out


def lines(*rows: str) -> str:
    return "\n".join(rows) + "\n"


def commit(repo: Path, msg: str, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", msg)


@pytest.fixture
def old(tmp_path) -> tuple[Path, Path]:
    """(old upstream work tree with tag `upstream`, folder of a 3-patch series made with format-patch on it).

    0001 changes a.c line 5; 0002 a.c line 30 and b.h; 0003 adds c.c and changes a.c line 31 (next to 0002's)
    and the README."""
    repo = tmp_path / "old"
    upstream.unpack_base(repo, write_tree(tmp_path / "old-src"), "old upstream")
    p1 = edit(A, l5="int a_5 = 500; /* patch 1 */")
    commit(repo, "patch one", {"src/a.c": lines(*p1)})
    p2 = edit(p1, l30="int a_30 = 3000; /* patch 2 */")
    commit(repo, "patch two", {"src/a.c": lines(*p2), "src/b.h": lines(*B, "int b3(void);")})
    p3 = edit(p2, l31="int a_31 = 3100; /* patch 3 */")
    commit(repo, "patch three", {"src/a.c": lines(*p3), "src/c.c": "int c;\n", "README": "llama\nnew readme line\n"})
    series = tmp_path / "series"
    git(repo, "format-patch", "-q", "--zero-commit", "--no-signature", "-N", "-o", str(series), "upstream..HEAD")
    return repo, series


def statuses(rows: list[dict]) -> list[str]:
    return [r["status"] for r in rows]


def applies_plainly(patches: list[Path], onto: Path, tmp: Path) -> bool:
    """Every patch goes onto the upstream `onto` with plain `git am` (no 3-way)."""
    repo = tmp / "check"
    upstream.unpack_base(repo, onto, "check")
    proc = subprocess.run(["git", "-C", str(repo), "am", "-q", *map(str, patches)], capture_output=True, env=GIT_ENV)
    return proc.returncode == 0


@pytest.mark.slow  # runs git
def test_identical_upstream_is_all_clean(old, tmp_path):
    repo, series = old
    new = write_tree(tmp_path / "new")
    rows = rb.dry_run(str(new), series, tree=tmp_path / "t", old=repo)
    assert statuses(rows) == ["clean"] * 3
    assert [r["patch"][:5] for r in rows] == ["0001-", "0002-", "0003-"]
    assert not list(tmp_path.glob("rebase-dry-run-*")), "the throwaway tree is removed"
    written = rb.rebase(str(new), series, tree=tmp_path / "t", out=tmp_path / "out", old=repo)
    assert [p.read_bytes() for p in written] == [p.read_bytes() for p in sorted(series.glob("*.patch"))]


@pytest.mark.slow
def test_unrelated_change_far_from_the_hunks(old, tmp_path):
    repo, series = old
    new = write_tree(tmp_path / "new", a=["/* new header */", "#include <x.h>", *edit(A, l18="int a_18 = -18;")])
    rows = rb.dry_run(str(new), series, tree=tmp_path / "t", old=repo)
    assert set(statuses(rows)) <= {"clean", "3-way"}
    written = rb.rebase(str(new), series, tree=tmp_path / "t", out=tmp_path / "out", old=repo)
    assert len(written) == 3 and applies_plainly(written, new, tmp_path)
    assert "int a_18 = -18;" in (tmp_path / "t" / "src" / "a.c").read_text()


@pytest.mark.slow
def test_changed_context_merges_3_way(old, tmp_path, capsys):
    repo, series = old
    new = write_tree(tmp_path / "new", a=edit(A, l8="int a_8 = 8; /* upstream */"))
    rows = rb.dry_run(str(new), series, tree=tmp_path / "t", old=repo)
    assert statuses(rows) == ["3-way", "clean", "clean"]
    print(rb.format_table(rows))
    assert "1 3-way" in capsys.readouterr().out
    written = rb.rebase(str(new), series, tree=tmp_path / "t", out=tmp_path / "out", old=repo)
    assert applies_plainly(written, new, tmp_path)
    text = (tmp_path / "t" / "src" / "a.c").read_text()
    assert "/* upstream */" in text and "/* patch 1 */" in text


@pytest.mark.slow
def test_conflict_dry_run_skips_it_and_marks_what_follows(old, tmp_path):
    repo, series = old
    new = write_tree(tmp_path / "new", a=edit(A, l30="int a_30 = -30; /* upstream */"))
    rows = rb.dry_run(str(new), series, tree=tmp_path / "t", old=repo)
    assert statuses(rows)[:2] == ["clean", "conflict"]
    assert rows[1]["files"] == ["src/a.c"]
    assert rows[2]["status"] != "clean" and rows[2]["after"] == [rows[1]["patch"]]
    assert "1 clean" in rb.format_table(rows) and "conflict" in rb.format_table(rows).splitlines()[-1]


def _conflicting(tmp_path) -> Path:
    return write_tree(tmp_path / "new", a=edit(A, l30="int a_30 = -30; /* upstream */"))


@pytest.mark.slow
def test_conflict_stops_mid_am_then_continue_exports(old, tmp_path, monkeypatch, capsys):
    """Through the CLI: stop at 0002 with the tree mid-`git am`; resolve, `git add`, --continue."""
    repo, series = old
    new, tree, out = _conflicting(tmp_path), tmp_path / "t", tmp_path / "out"
    monkeypatch.setattr(upstream, "patches_dir", lambda: series)
    monkeypatch.setattr(rb, "default_old", lambda: repo)
    argv = ["rebase", "--tree", str(tree), "--patches", str(out)]
    assert upstream_cli.main([*argv, "--onto", str(new)]) == 1
    err = capsys.readouterr().err
    assert "0002-patch-two.patch conflicts with the new upstream in: src/a.c" in err
    assert (tree / ".git" / "rebase-apply").is_dir()
    assert "<<<<<<<" in (tree / "src" / "a.c").read_text()
    assert not out.exists()

    assert upstream_cli.main(["rebase", "--continue", "--tree", str(tree)]) == 1, "unresolved: refused"
    assert "not resolved yet" in capsys.readouterr().err

    resolved = edit(A, l5="int a_5 = 500; /* patch 1 */", l30="int a_30 = 3000; /* patch 2 */")  # patch 2 wins
    (tree / "src" / "a.c").write_text(lines(*resolved))
    git(tree, "add", "src/a.c")
    assert upstream_cli.main(["rebase", "--continue", "--tree", str(tree)]) == 0
    assert "rebased series (3 patches)" in capsys.readouterr().out
    written = sorted(out.glob("*.patch"))
    assert [p.name for p in written] == [p.name for p in sorted(series.glob("*.patch"))]
    assert "-int a_30 = -30; /* upstream */\n+int a_30 = 3000; /* patch 2 */" in written[1].read_text()
    assert applies_plainly(written, new, tmp_path)
    assert not (tree / ".git" / "rebase-apply").exists()

    rb.rebase(str(write_tree(tmp_path / "same")), series, tree=tree, out=out, old=repo)  # a finished tree is replaced
    assert [p.read_bytes() for p in sorted(out.glob("*.patch"))] == [p.read_bytes() for p in sorted(series.glob("*.patch"))]


@pytest.mark.slow
def test_abort_removes_the_tree(old, tmp_path):
    repo, series = old
    tree = tmp_path / "t"
    with pytest.raises(rb.RebaseStopped) as stopped:
        rb.rebase(str(_conflicting(tmp_path)), series, tree=tree, out=tmp_path / "out", old=repo)
    assert stopped.value.patch.startswith("0002-") and stopped.value.files == ["src/a.c"]
    with pytest.raises(upstream.UpstreamError, match="in progress"):
        rb.rebase(str(tmp_path / "new"), series, tree=tree, old=repo)
    rb.abort(tree)
    assert not tree.exists()


@pytest.mark.slow
def test_tarballs_and_an_old_upstream_given_as_source(old, tmp_path):
    """A wrapped tarball as the new upstream; the old one unpacked from an sdist-like tarball."""
    repo, series = old
    new = write_tree(tmp_path / "new", a=edit(A, l8="int a_8 = 8; /* upstream */"))
    tgz = tmp_path / "llama.cpp-b9999.tar.gz"
    with tarfile.open(tgz, "w:gz") as tf:
        tf.add(new, arcname="llama.cpp-b9999")
    sdist = tmp_path / "pkg-0.0.1.tar.gz"
    with tarfile.open(sdist, "w:gz") as tf:
        tf.add(tmp_path / "old-src", arcname="pkg-0.0.1/vendor/llama.cpp")
    rows = rb.dry_run(str(tgz), series, tree=tmp_path / "t", old=sdist)
    assert statuses(rows) == ["3-way", "clean", "clean"]


def _tar(path: Path, names: list[str]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 1
            tf.addfile(info, io.BytesIO(b"x"))
    return path


@pytest.mark.parametrize("names, prefix", [
    (["CMakeLists.txt", "ggml/x.c", "vendor/json.hpp"], ""),
    (["./CMakeLists.txt", "./ggml/x.c"], ""),
    (["llama.cpp-b1/CMakeLists.txt", "llama.cpp-b1/ggml/x.c"], "llama.cpp-b1/"),
    (["pkg-1/setup.py", "pkg-1/vendor/llama.cpp/CMakeLists.txt"], "pkg-1/vendor/llama.cpp/"),
    (["vendor/llama.cpp/CMakeLists.txt", "pyproject.toml"], "vendor/llama.cpp/"),
])
def test_where_the_tree_is_in_a_tarball(tmp_path, names, prefix):
    assert rb.resolve_source(str(_tar(tmp_path / "x.tgz", names))).prefix == prefix


def test_a_version_is_fetched_as_the_sdist(tmp_path, monkeypatch):
    monkeypatch.setenv("RIDGEFILL_CACHE", str(tmp_path / "cache"))
    asked = []

    def fake_download(spec, dest, sdist=False):
        asked.append((spec, sdist))
        dest.mkdir(parents=True, exist_ok=True)
        return _tar(dest / "llama_cpp_python-0.3.34.tar.gz", ["llama_cpp_python-0.3.34/vendor/llama.cpp/ggml/x.c"])

    monkeypatch.setattr(fetch, "pip_download", fake_download)
    src = rb.resolve_source("0.3.34")
    assert asked == [("llama-cpp-python==0.3.34", True)]
    assert src.prefix == "llama_cpp_python-0.3.34/vendor/llama.cpp/" and src.path.parent == paths.cache_dir() / "upstream"
    rb.resolve_source("0.3.34")
    assert len(asked) == 1, "the second time comes from the cache"


def test_a_source_that_is_neither_path_nor_version_is_refused(tmp_path):
    with pytest.raises(upstream.UpstreamError, match="neither an existing folder .* nor a llama-cpp-python version"):
        rb.resolve_source(str(tmp_path / "no-such-thing"))
    with pytest.raises(upstream.UpstreamError, match="neither"):
        rb.rebase("latest", [], tree=tmp_path / "t")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(upstream.UpstreamError, match="must be a .tar.gz or .tgz"):
        rb.resolve_source(str(tmp_path / "notes.txt"))
    assert upstream_cli.main(["rebase", "--onto", "no/such/dir", "--dry-run"]) == 1


def test_a_tree_that_is_not_a_rebase_tree_is_never_replaced_or_removed(tmp_path):
    tree = tmp_path / "llama.cpp"
    (tree / ".git").mkdir(parents=True)
    with pytest.raises(upstream.UpstreamError, match="not a rebase tree"):
        rb.rebase(str(write_tree(tmp_path / "new")), [], tree=tree)
    with pytest.raises(upstream.UpstreamError, match="no rebase in"):
        rb.abort(tree)
    assert (tree / ".git").is_dir()


def test_cli_has_upstream_rebase():
    args = cli.build_parser().parse_args(["upstream", "rebase", "--onto", "0.3.34", "--dry-run"])
    assert args.func is upstream_cli.run and args.upstream_cmd == "rebase" and args.onto == "0.3.34" and args.dry_run
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["upstream", "rebase", "--onto", "x", "--continue"])


@pytest.mark.slow
def test_3_way_finds_preimages_that_earlier_patches_made(old, tmp_path):
    """0002's and 0003's preimage of a.c exists only with 0001 (and 0002) applied to the old upstream."""
    repo, series = old
    new = write_tree(tmp_path / "new", a=edit(A, l33="int a_33 = 33; /* upstream */"))
    rows = rb.dry_run(str(new), series, tree=tmp_path / "t", old=repo)
    assert statuses(rows) == ["clean", "3-way", "3-way"]


@pytest.mark.slow
def test_a_checkout_as_source_gives_its_tracked_files_only(old, tmp_path):
    repo, series = old
    new = write_tree(tmp_path / "new")
    git(new, "init", "-q")
    git(new, "add", "-A")
    git(new, "commit", "-qm", "upstream")
    (new / "build").mkdir()
    (new / "build" / "libllama.so").write_text("not source")
    written = rb.rebase(str(new), series, tree=tmp_path / "t", out=tmp_path / "out", old=repo)
    assert len(written) == 3 and not (tmp_path / "t" / "build").exists()
