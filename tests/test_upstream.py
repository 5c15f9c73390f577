"""The fork is a patch series on a pinned, verified upstream; nothing upstream is tracked."""

import subprocess

import pytest

from ridgefill import paths, upstream


def test_series_is_ordered_and_nonempty():
    names = [p.name for p in upstream.series()]
    assert names, "ggml-patches/ holds no patch"
    assert names == sorted(names)
    assert all(n[:4].isdigit() for n in names)


def test_no_upstream_source_or_model_tracked():
    files = subprocess.run(["git", "-C", str(paths.repo_root()), "ls-files"], capture_output=True, text=True, check=True).stdout.split()
    upstream_like = [f for f in files if f.startswith(("ggml/", "src/llama", "common/", "vendor/", "llama.cpp/", "tools/"))]
    assert upstream_like == []
    assert not [f for f in files if f.endswith(".gguf")]


def test_build_commit_names_upstream_and_series():
    bc = upstream.build_commit()
    assert bc.startswith(upstream.UPSTREAM_COMMIT + "+rf.")
    assert bc.endswith(upstream.series_hash()[:8])


def test_cached_sdist_verifies():
    path = upstream.fetch_sdist()
    assert path.name == upstream.SDIST_NAME
    from ridgefill.fetch import sha256_file

    assert sha256_file(path) == upstream.SDIST_SHA256


@pytest.mark.slow
def test_apply_then_export_round_trips(tmp_path):
    """prepare() on a fresh tree then export() reproduces ggml-patches/ byte for byte."""
    tree = upstream.prepare(tmp_path / "llama.cpp")
    assert upstream.status(tree) == "up-to-date"
    log = subprocess.run(["git", "-C", str(tree), "log", "--format=%s", "upstream..HEAD"], capture_output=True, text=True, check=True)
    assert len(log.stdout.splitlines()) == len(upstream.series())

    out = tmp_path / "patches"
    written = upstream.export(tree, out=out)
    assert [p.name for p in written] == [p.name for p in upstream.series()]
    for new, old in zip(written, upstream.series()):
        assert new.read_bytes() == old.read_bytes(), f"{new.name} differs after export"


@pytest.mark.slow
def test_prepare_refuses_to_drop_unexported_work(tmp_path):
    tree = upstream.prepare(tmp_path / "llama.cpp")
    (tree / "README.md").write_text("local edit\n")
    subprocess.run(["git", "-C", str(tree), "commit", "-qam", "local"], check=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})
    assert upstream.status(tree) == "unexported-commits"
    with pytest.raises(upstream.UpstreamError, match="not in ggml-patches"):
        upstream.prepare(tree)
    upstream.prepare(tree, force=True)
    assert upstream.status(tree) == "up-to-date"
    assert (tree / "README.md").read_text() != "local edit\n"
