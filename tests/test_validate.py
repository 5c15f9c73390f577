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


def _window_check(path):
    return next(c for c in validate.check_file(path) if c.name == "window")


def _window(w_rows: int = 3, rank: int = 2, **extra) -> dict[str, np.ndarray]:
    out = _maps(**{"blk.1.ridge_window.weight": np.ones((rank, w_rows * D), np.float32),
                   "blk.3.ridge_map_window.weight": np.ones((D, rank), np.float16)})
    out.update(extra)
    return out


def test_window_maps_pass(tmp_path):
    path = _write(tmp_path / "ok.gguf", _window())
    c = _window_check(path)
    assert c.ok and "1 layers read rows t-1..t-3 through 2 columns" in c.message and _maps_check(path).ok
    assert _window_check(_write(tmp_path / "none.gguf", _maps())).message == "no window maps"


@pytest.mark.parametrize("tensors,says", [
    ({"blk.1.ridge_window.weight": np.ones((2, 3 * D + 1), np.float32)}, "shape"),       # W*d + 1 inputs
    ({"blk.1.ridge_window.weight": np.ones((2, 17 * D), np.float32)}, "shape"),          # W = 17
    ({"blk.1.ridge_window.weight": np.ones((D + 1, 3 * D), np.float32)}, "shape"),       # rank above d
    ({"blk.1.ridge_window.weight": np.ones((2, 3 * D), np.float64)}, "not supported"),
    ({"blk.1.ridge_window.weight": np.full((2, 3 * D), np.inf, np.float32)}, "non-finite"),
    ({"blk.3.ridge_map_window.weight": np.ones((D, 3), np.float32)}, "shape"),           # rank + 1 columns
    ({"blk.3.ridge_map_window.weight": np.ones((2, D), np.float32)}, "shape"),           # transposed
    ({"blk.2.ridge_window.weight": np.ones((2, 3 * D), np.float32)}, "split layer 1 only"),
])
def test_bad_window_tensors_are_refused_by_name(tmp_path, tensors, says):
    c = _window_check(_write(tmp_path / "bad.gguf", _window(**tensors)))
    assert not c.ok and next(iter(tensors)) in c.message and says in c.message


def test_a_window_projection_and_its_maps_come_together(tmp_path):
    only_maps = _maps(**{"blk.3.ridge_map_window.weight": np.ones((D, 2), np.float32)})
    c = _window_check(_write(tmp_path / "a.gguf", only_maps))
    assert not c.ok and "needs the window projection blk.1.ridge_window.weight" in c.message
    only_proj = _maps(**{"blk.1.ridge_window.weight": np.ones((2, 3 * D), np.float32)})
    c = _window_check(_write(tmp_path / "b.gguf", only_proj))
    assert not c.ok and "no map reads" in c.message
    at_split = _window(**{"blk.1.ridge_map_window.weight": np.ones((D, 2), np.float32)})
    assert "outside" in _maps_check(_write(tmp_path / "c.gguf", at_split)).message
