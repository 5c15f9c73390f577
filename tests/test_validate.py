"""The Python side of the loader's RidgeFill checks (validate.py) on small hand-made GGUFs: no model loads."""

import numpy as np
import pytest

from conftest import write_gguf
from ridgefill.format import validate

D, N_LAYER, SPLIT = 8, 4, 1
KEYS = {"llama.block_count": N_LAYER, "llama.embedding_length": D, "llama.context_length": 64,
        "ridgefill.format_version": 1, "ridgefill.split_layer": SPLIT}


def _write(path, tensors: dict[str, np.ndarray]):
    return write_gguf(path, KEYS, tensors)


def _maps(**extra) -> dict[str, np.ndarray]:
    eye = np.eye(D, dtype=np.float32)
    out = {f"blk.{l}.ridge_map.weight": eye for l in range(SPLIT + 1, N_LAYER)}
    out.update({f"blk.{l}.ridge_map.bias": np.zeros(D, np.float32) for l in range(SPLIT + 1, N_LAYER)})
    out.update(extra)
    return out


def _maps_check(path):
    return next(c for c in validate.check_file(path) if c.name == "maps")


def test_lagged_maps_pass(tmp_path):
    c = _maps_check(_write(tmp_path / "ok.gguf", _maps(**{"blk.2.ridge_map_prev.weight": np.eye(D, dtype=np.float16)})))
    assert c.ok and "1 also reading the previous row" in c.message


@pytest.mark.parametrize("name,arr,says", [
    ("blk.1.ridge_map_prev.weight", np.eye(D, dtype=np.float32), "outside"),              # at the split layer
    ("blk.4.ridge_map_prev.weight", np.eye(D, dtype=np.float32), "outside"),              # past the last layer
    ("blk.2.ridge_map_prev.weight", np.eye(D + 1, dtype=np.float32)[:D], "shape"),
    ("blk.2.ridge_map_prev.weight", np.eye(D, dtype=np.float64), "not supported"),
    ("blk.2.ridge_map_prev.weight", np.full((D, D), np.nan, np.float32), "non-finite"),
    ("blk.x.ridge_map.weight", np.eye(D, dtype=np.float32), "not a RidgeFill map tensor"),
    ("blk.2.ridge_map.extra", np.eye(D, dtype=np.float32), "not a RidgeFill map tensor"),
])
def test_bad_map_tensors_are_refused_by_name(tmp_path, name, arr, says):
    c = _maps_check(_write(tmp_path / "bad.gguf", _maps(**{name: arr})))
    assert not c.ok and name in c.message and says in c.message
