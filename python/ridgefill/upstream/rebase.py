"""`rebase`: move the patch series to another upstream llama.cpp.

The rebase tree (build/llama.cpp-rebase) holds the new upstream (tag `upstream`) and, on side refs, the
old upstream with the series replayed on it, so that `git am -3` finds each patch's preimage blobs and
can fall back to a 3-way merge. The patches go on one by one; at a conflict the tree is left mid-`git am`
for the user, and `--continue` goes on. The result is exported to build/rebased-patches for review,
never straight into ggml-patches/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import paths
from . import tree as upstream
from .onto import Source, resolve_source
from .tree import UpstreamError, _git

_OLD_BASE = "refs/ridgefill/old-upstream"
_OLD_SERIES = "refs/ridgefill/old-series"
_STATE = "ridgefill-rebase"
_DIFF_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)


class RebaseStopped(UpstreamError):
    """A patch conflicts with the new upstream; the tree is left mid-`git am` for the user."""

    def __init__(self, tree: Path, patch: str, files: list[str], detail: str = ""):
        self.tree, self.patch, self.files = tree, patch, files
        super().__init__(
            f"{patch} conflicts with the new upstream in: {', '.join(files)}\n"
            f"resolve it in {tree} (edit, then `git add`), then `rebase --continue`; or give up: `rebase --abort`"
            + (f"\n{detail}" if detail else ""))


def default_tree() -> Path:
    return paths.build_dir() / "llama.cpp-rebase"


def default_out() -> Path:
    return paths.build_dir() / "rebased-patches"


def default_old() -> Path:
    """What the series is made against: build/llama.cpp's `upstream` tag, else the pinned sdist."""
    cur = upstream.tree_dir()
    if (cur / ".git").is_dir() and _run(cur, "rev-parse", "-q", "--verify", "refs/tags/upstream").returncode == 0:
        return cur
    return upstream.fetch_sdist()


def _run(tree: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **upstream._GIT_ENV, **(env or {})}
    return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, env=full_env)


def _series(series: list[Path] | Path) -> list[Path]:
    return sorted(series.glob("*.patch")) if isinstance(series, Path) else list(series)


def _patch_files(patch: Path) -> list[str]:
    found = _DIFF_HEADER.findall(patch.read_text(errors="replace"))
    return sorted({name for pair in found for name in pair})


def make_tree(tree: Path, source: Source, old: Path, series: list[Path]) -> None:
    """`tree` = the new upstream (tag `upstream`), plus the old upstream and the series on it as side refs."""
    tree.parent.mkdir(parents=True, exist_ok=True)
    upstream.unpack_base(tree, source.path, f"upstream llama.cpp ({source.label})", source.prefix)
    try:
        _import_old(tree, old)
        _replay_old(tree, series)
    except BaseException:
        shutil.rmtree(tree, ignore_errors=True)
        raise


def _import_old(tree: Path, old: Path) -> None:
    """The old upstream as a side ref: a work tree's tag `upstream`, or a source unpacked first."""
    if (old / ".git").is_dir():
        _git(tree, "fetch", "-q", "--no-tags", str(old.resolve()), f"+refs/tags/upstream:{_OLD_BASE}")
        return
    src = resolve_source(str(old))
    with tempfile.TemporaryDirectory(dir=tree.parent) as tmp:
        repo = Path(tmp) / "old"
        upstream.unpack_base(repo, src.path, f"old upstream ({src.label})", src.prefix)
        _import_old(tree, repo)


def _replay_old(tree: Path, series: list[Path]) -> None:
    """The series on the old upstream, one commit per patch: the preimage blobs `git am -3` looks up."""
    env = {"GIT_INDEX_FILE": str(tree.resolve() / ".git" / "ridgefill-old-index")}
    _git(tree, "read-tree", _OLD_BASE, env=env)
    head = _git(tree, "rev-parse", _OLD_BASE)
    for patch in series:
        if _run(tree, "apply", "--cached", str(patch), env=env).returncode != 0:
            print(f"note: {patch.name} does not apply to the old upstream; 3-way merges from it on may fail",
                  file=sys.stderr)
            break
        head = _git(tree, "commit-tree", _git(tree, "write-tree", env=env), "-p", head, "-m", patch.name)
    _git(tree, "update-ref", _OLD_SERIES, head)
    Path(env["GIT_INDEX_FILE"]).unlink(missing_ok=True)


def _apply_one(tree: Path, patch: Path) -> tuple[str, list[str], str]:
    """`git am -3` one patch: (clean | 3-way | upstream | conflict, conflicting files, git's output if no file is)."""
    plain = _run(tree, "apply", "--check", str(patch)).returncode == 0
    head = _git(tree, "rev-parse", "HEAD")
    proc = _run(tree, "am", "-3", "--keep-cr", "--committer-date-is-author-date", str(patch))
    if proc.returncode == 0:
        if _git(tree, "rev-parse", "HEAD") == head:
            return "upstream", [], ""  # git am found nothing left to change: the patch is already upstream
        return ("clean" if plain else "3-way"), [], ""
    unmerged = _git(tree, "diff", "--name-only", "--diff-filter=U").splitlines()
    return "conflict", unmerged or _patch_files(patch), "" if unmerged else (proc.stdout + proc.stderr).strip()


def _state_dir(tree: Path) -> Path:
    return tree / ".git" / _STATE


def _load(tree: Path) -> dict:
    try:
        return json.loads((_state_dir(tree) / "state.json").read_text())
    except (OSError, ValueError):
        raise UpstreamError(f"no rebase in {tree}: start one with `rebase --onto SOURCE`") from None


def _save(tree: Path, state: dict) -> None:
    (_state_dir(tree) / "state.json").write_text(json.dumps(state, indent=1) + "\n")


def _make_room(tree: Path) -> None:
    """Remove a finished rebase tree; refuse one in progress, or anything that is not a rebase tree."""
    if not tree.exists():
        return
    try:
        state = _load(tree)
    except UpstreamError:
        raise UpstreamError(f"{tree} exists and is not a rebase tree: choose another --tree or remove it") from None
    if not state.get("done"):
        raise UpstreamError(f"a rebase is in progress in {tree}: `rebase --continue` or `rebase --abort` first")
    shutil.rmtree(tree)


def rebase(onto: str, series: list[Path] | Path, tree: Path | None = None, out: Path | None = None,
           old: Path | None = None) -> list[Path]:
    """`tree` = `onto` + the series (a list or a folder of patches), made against `old`; the rebased
    series is exported to `out`. Raises RebaseStopped at a conflict, the tree left mid-`git am`."""
    source = resolve_source(onto)
    series, tree, out = _series(series), tree or default_tree(), out or default_out()
    _make_room(tree)
    make_tree(tree, source, old or default_old(), series)
    saved = _state_dir(tree) / "series"
    saved.mkdir(parents=True)
    for patch in series:
        shutil.copy2(patch, saved / patch.name)
    _save(tree, {"onto": onto, "out": str(out.resolve()), "series": [p.name for p in series], "next": 0})
    print(f"rebase tree {tree}: {source.label} + {len(series)} patches")
    return _apply_rest(tree)


def _apply_rest(tree: Path) -> list[Path]:
    state = _load(tree)
    names = state["series"]
    for i in range(state["next"], len(names)):
        state.update(next=i, head=_git(tree, "rev-parse", "HEAD"))
        _save(tree, state)
        status, files, detail = _apply_one(tree, _state_dir(tree) / "series" / names[i])
        if status == "conflict":
            raise RebaseStopped(tree, names[i], files, detail)
        print(f"{status:9s} {names[i]}")
    written = upstream.export(tree, Path(state["out"]))
    state.update(next=len(names), done=True)
    _save(tree, state)
    print(f"rebased series ({len(written)} patches) in {state['out']}: review it, then replace ggml-patches/ "
          "with it and pin the new upstream in upstream.py")
    return written


def cont(tree: Path | None = None, out: Path | None = None) -> list[Path]:
    """After the user resolved the stopped patch and `git add`-ed it: finish it, then apply the rest."""
    tree = tree or default_tree()
    state = _load(tree)
    if out:
        state["out"] = str(out.resolve())
    if state["next"] < len(state["series"]):
        _finish_stopped(tree, state)
        state["next"] += 1
    _save(tree, state)
    return _apply_rest(tree)


def _finish_stopped(tree: Path, state: dict) -> None:
    name = state["series"][state["next"]]
    if (tree / ".git" / "rebase-apply").is_dir():
        proc = _run(tree, "am", "--continue")
        if proc.returncode != 0:
            unmerged = _git(tree, "diff", "--name-only", "--diff-filter=U").replace("\n", ", ")
            raise UpstreamError(f"{name} is not resolved yet{f' (unmerged: {unmerged})' if unmerged else ''}:\n"
                                f"{(proc.stdout + proc.stderr).strip()}")
        print(f"resolved  {name}")
    elif _git(tree, "rev-parse", "HEAD") == state.get("head"):
        print(f"skipped   {name} (its `git am` ended without a commit)")
    else:
        print(f"resolved  {name}")


def abort(tree: Path | None = None) -> None:
    """Stop the rebase and remove its tree (only a rebase tree: never build/llama.cpp)."""
    tree = tree or default_tree()
    _load(tree)
    _run(tree, "am", "--abort")
    shutil.rmtree(tree)
    print(f"removed {tree}")


def dry_run(onto: str, series: list[Path] | Path, tree: Path | None = None, old: Path | None = None) -> list[dict]:
    """Per patch: clean, 3-way, upstream (already there) or conflict, in a throwaway tree next to `tree`.
    A conflicting patch is skipped; later ones touching its files are marked `after` it."""
    source, series = resolve_source(onto), _series(series)
    parent = (tree or default_tree()).parent
    parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rebase-dry-run-", dir=parent) as tmp:
        work = Path(tmp) / "llama.cpp"
        make_tree(work, source, old or default_old(), series)
        return _dry_apply(work, series)


def _dry_apply(tree: Path, series: list[Path]) -> list[dict]:
    rows, skipped = [], {}
    for patch in series:
        status, files, _ = _apply_one(tree, patch)
        touched = set(_patch_files(patch))
        after = [name for name, theirs in skipped.items() if theirs & touched] if status != "clean" else []
        rows.append({"patch": patch.name, "status": status, "files": files, "after": after})
        if status == "conflict":
            _git(tree, "am", "--skip")
            skipped[patch.name] = touched
    return rows


def format_table(rows: list[dict]) -> str:
    width = max([len(r["patch"]) for r in rows] + [5])
    lines = [f"{'patch':{width}s}  {'status':9s} files"]
    for r in rows:
        note = f"  (after skipped {', '.join(r['after'])})" if r["after"] else ""
        lines.append(f"{r['patch']:{width}s}  {r['status']:9s} {' '.join(r['files'])}{note}".rstrip())
    counts = {s: sum(r["status"] == s for r in rows) for s in ("clean", "3-way", "conflict", "upstream")}
    summary = f"{counts['clean']} clean, {counts['3-way']} 3-way, {counts['conflict']} conflict"
    if counts["upstream"]:
        summary += f", {counts['upstream']} already upstream"
    return "\n".join(lines + [summary])


def add_command(sub) -> None:
    r = sub.add_parser("rebase", help="move the series to another upstream (result in build/rebased-patches)",
                       description="Move the patch series to another upstream llama.cpp.")
    what = r.add_mutually_exclusive_group(required=True)
    what.add_argument("--onto", metavar="SOURCE", help="llama-cpp-python sdist version (e.g. 0.3.34), llama.cpp "
                      "folder, or .tar.gz/.tgz (a llama.cpp tree, or an sdist with vendor/llama.cpp)")
    what.add_argument("--continue", dest="cont", action="store_true",
                      help="go on after resolving the conflict in the rebase tree and `git add`-ing the files")
    what.add_argument("--abort", action="store_true", help="stop, and remove the rebase tree")
    r.add_argument("--tree", type=Path, help="rebase work tree (default: build/llama.cpp-rebase)")
    r.add_argument("--dry-run", action="store_true",
                   help="with --onto: per patch clean / 3-way / conflict, in a throwaway tree (exit 1 on a conflict)")
    r.add_argument("--patches", type=Path, metavar="DIR", help="rebased series (default: build/rebased-patches)")


def run(args) -> int:
    if args.dry_run:
        if not args.onto:
            raise UpstreamError("--dry-run goes with --onto")
        rows = dry_run(args.onto, upstream.series(), args.tree)
        print(format_table(rows))
        return 1 if any(r["status"] == "conflict" for r in rows) else 0
    if args.abort:
        abort(args.tree)
    elif args.cont:
        cont(args.tree, args.patches)
    else:
        rebase(args.onto, upstream.series(), args.tree, args.patches)
    return 0
