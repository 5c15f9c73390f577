"""The fork is a patch series on a pinned, verified upstream; nothing upstream is tracked."""

import subprocess

import pytest

from ridgefill import paths
from ridgefill.upstream import tree as upstream


def test_series_is_numbered_without_gaps():
    """git am applies ggml-patches/ in name order: 0001, 0002, ... with no gap or duplicate number."""
    names = [p.name for p in upstream.series()]
    assert names, "ggml-patches/ holds no patch"
    assert [n[:5] for n in names] == [f"{i:04d}-" for i in range(1, len(names) + 1)]


@pytest.mark.slow  # runs git
def test_no_upstream_source_or_model_tracked():
    files = subprocess.run(["git", "-C", str(paths.repo_root()), "ls-files"], capture_output=True, text=True, check=True).stdout.split()
    upstream_like = [f for f in files if f.startswith(("ggml/", "src/llama", "common/", "vendor/", "llama.cpp/", "tools/"))]
    assert upstream_like == []
    assert not [f for f in files if f.endswith(".gguf")]


def test_build_commit_names_upstream_and_series():
    bc = upstream.build_commit()
    assert bc.startswith(upstream.UPSTREAM_COMMIT + "+rf.")
    assert bc.endswith(upstream.series_hash()[:8])


def test_a_cached_file_with_one_flipped_byte_is_refused(tmp_path):
    """The check every cached download (sdist, models, data) goes through."""
    from ridgefill import fetch

    path = tmp_path / "pkg.tar.gz"
    path.write_bytes(b"x" * 4096)
    good = fetch.sha256_file(path)
    assert fetch.require_verified(path, good, "pkg") == path
    path.write_bytes(b"x" * 2048 + b"y" + b"x" * 2047)
    assert not fetch.is_verified(path, good)
    with pytest.raises(fetch.FetchError, match="pkg: sha256 mismatch"):
        fetch.require_verified(path, good, "pkg")
    with pytest.raises(fetch.FetchError, match="is missing"):
        fetch.require_verified(tmp_path / "gone", good, "pkg")


@pytest.fixture(scope="module")
def prepared_tree(tmp_path_factory):
    """One fresh upstream tree with the series applied, shared by the tests below (each leaves it up to date)."""
    return upstream.prepare(tmp_path_factory.mktemp("upstream") / "llama.cpp")


@pytest.mark.slow
def test_apply_then_export_round_trips(prepared_tree, tmp_path):
    """prepare() on a fresh tree then export() reproduces ggml-patches/ byte for byte."""
    tree = prepared_tree
    assert upstream.status(tree) == "up-to-date"
    log = subprocess.run(["git", "-C", str(tree), "log", "--format=%s", "upstream..HEAD"], capture_output=True, text=True, check=True)
    assert len(log.stdout.splitlines()) == len(upstream.series())

    out = tmp_path / "patches"
    written = upstream.export(tree, out=out)
    assert [p.name for p in written] == [p.name for p in upstream.series()]
    for new, old in zip(written, upstream.series()):
        assert new.read_bytes() == old.read_bytes(), f"{new.name} differs after export"


@pytest.mark.slow
def test_prepare_refuses_to_drop_unexported_work(prepared_tree):
    tree = prepared_tree
    (tree / "README.md").write_text("local edit\n")
    subprocess.run(["git", "-C", str(tree), "commit", "-qam", "local"], check=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})
    assert upstream.status(tree) == "unexported-commits"
    with pytest.raises(upstream.UpstreamError, match="not in ggml-patches"):
        upstream.prepare(tree)
    upstream.prepare(tree, force=True)
    assert upstream.status(tree) == "up-to-date"
    assert (tree / "README.md").read_text() != "local edit\n"
