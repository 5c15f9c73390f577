from __future__ import annotations

from pathlib import Path

import pytest

from ridgefill.sources import models
from ridgefill.errors import MissingFile
from ridgefill.paths import tool_path


_guard = pytest.MonkeyPatch()


def pytest_sessionstart(session):
    """matplotlib builds its font cache on first use, running `fc-list`: let it do so before any guard."""
    import matplotlib.font_manager  # noqa: F401


BIG_GGUF = 16 << 20  # a fast test may read the small GGUFs it writes, not a model


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """`make test-fast` (-m "not slow") loads no model, fetches nothing and starts no process: enforced for
    every test not marked slow, fixtures included (so a session fixture cannot do it on its behalf)."""
    if item.get_closest_marker("slow"):
        return
    import subprocess

    import gguf

    from ridgefill import _core, fetch

    def refuse(*args, **kwargs):
        raise AssertionError(f"{item.nodeid} loads or fetches a model or starts a process: mark it slow")

    reader_init, verified = gguf.GGUFReader.__init__, fetch.is_verified

    def small_reader(self, path, *args, **kwargs):
        if Path(path).stat().st_size > BIG_GGUF:
            refuse()
        reader_init(self, path, *args, **kwargs)

    def small_verified(path, *args, **kwargs):  # a cached model's check reads the model
        if Path(path).is_file() and Path(path).stat().st_size > BIG_GGUF:
            refuse()
        return verified(path, *args, **kwargs)

    _guard.setattr(subprocess.Popen, "_execute_child", refuse)
    _guard.setattr(_core, "Model", refuse)
    _guard.setattr(fetch, "is_verified", small_verified)
    _guard.setattr(fetch, "pip_download", refuse)
    _guard.setattr(gguf.GGUFReader, "__init__", small_reader)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    _guard.undo()


def calibrate_cli(base, out, *extra, tokens: int = 1536, split: int = 20):
    """`ridgefill calibrate` as a user runs it (short windows, 2 threads); the statistics it wrote."""
    import subprocess
    import sys

    from ridgefill.fit.stats import CalibrationStats

    run = subprocess.run([sys.executable, "-m", "ridgefill", "calibrate", str(base), "--split", str(split),
                          "--tokens", str(tokens), "--window", "256", "--threads", "2", "-o", str(out), *map(str, extra)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    return CalibrationStats.load(out)


def tool(name: str) -> Path:
    """A fork binary installed into the venv by the build."""
    try:
        return tool_path(name)
    except MissingFile as err:
        pytest.fail(str(err))


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return models.fetch_model("smollm2-135m")


@pytest.fixture(scope="session")
def smollm2(smollm2_path):
    from ridgefill.runtime import Model

    return Model(smollm2_path)


@pytest.fixture(scope="session")
def sample_text() -> str:
    """Prose that is the same on every machine: the stdlib's own docs for textwrap."""
    import textwrap

    return Path(textwrap.__file__).read_text()


def random_maps_model(base, split: int, out: Path, seed: int = 0, map_type: str = "f32", route_stats: bool = False,
                      lag_every: int = 0, window: tuple[int, int] = (0, 0)):
    """`base` + random, non-symmetric F32 maps (W = I + noise, b = noise) at `split`: (Model, Maps).

    Far from the identity, so a wrong or transposed map shows; easy to recompute in numpy.
    `route_stats`: also routing statistics (a random mean, a whitening matrix of random rows).
    `lag_every` k > 0: every k-th late layer's map also reads the previous row (W_prev = noise).
    `window` (W, rank): a random window projection of rows t-1..t-W, read by every late layer but the
    second (so some layer reads a window and a previous row, some a window only, one neither).
    """
    import numpy as np

    from ridgefill import format as fmt
    from ridgefill.fit.ridge import LayerFit, Maps
    from ridgefill.runtime import Model
    from ridgefill.fit.stats import Provenance

    ident = fmt.identity_of(base)
    rng = np.random.default_rng(seed)
    layers = list(range(split + 1, ident.n_layer))
    d = ident.n_embd
    w = (np.eye(d) + 0.05 * rng.normal(size=(len(layers), d, d))).astype(np.float32)
    b = (0.1 * rng.normal(size=(len(layers), d))).astype(np.float32)
    maps = Maps(split, layers, w, b, [LayerFit(l, 0, 0, 0, 0, 0, 0, lag=lag_every > 0 and j % lag_every == 0)
                                      for j, l in enumerate(layers)])
    if lag_every:
        maps.weights_prev = (0.05 * rng.normal(size=w.shape)).astype(np.float32)
    win_rows, rank = window
    if win_rows:
        maps.window = (rng.normal(size=(rank, win_rows * d)) / np.sqrt(win_rows * d)).astype(np.float32)
        maps.weights_window = (0.3 * rng.normal(size=(len(layers), d, rank))).astype(np.float32)
        for j, f in enumerate(maps.fits):
            f.window = j != 1
    if route_stats:
        from ridgefill.fit.route import RouteStats

        maps.route = RouteStats(rng.normal(size=d).astype(np.float32), np.tril(rng.normal(size=(d, d))).astype(np.float32))
    return Model(fmt.pack(base, maps, ident, Provenance(), out, map_type=map_type)), maps


def random_kv_maps(base, split: int, seed: int, lag: bool, cover: list[int] | None = None, input_noise: float = 0.0):
    """Random K/V maps of the late layers `cover` (default: every late attention layer) and input maps of all late
    layers (what a file keeps of them: those of the layers the K/V maps do not cover), the identity plus
    `input_noise` times a random matrix."""
    import numpy as np

    from ridgefill import format as fmt
    from ridgefill.fit.attention import attention_layers
    from ridgefill.format.maps import KVFit, KVMaps, LayerFit, Maps

    ident = fmt.identity_of(base)
    rng = np.random.default_rng(seed)
    layers = list(range(split + 1, ident.n_layer))
    attn = attention_layers(base, layers)
    cover = sorted(attn) if cover is None else list(cover)
    d, rows = ident.n_embd, 2 * attn[cover[0]].n_head_kv * attn[cover[0]].head_dim
    m, c = len(layers), len(cover)
    w = (rng.normal(size=(c, rows, d)) / np.sqrt(d)).astype(np.float32)
    b = (0.1 * rng.normal(size=(c, rows))).astype(np.float32)
    prev = (0.5 * rng.normal(size=(c, rows, d)) / np.sqrt(d)).astype(np.float32) if lag else None
    kv = KVMaps(cover, w, b, [KVFit(l, lag, 0.1, 0.1, 0.5, 0.5, 0.4, 0.4) for l in cover], prev)
    inp = np.eye(d, dtype=np.float32) + input_noise * rng.normal(size=(m, d, d)).astype(np.float32) / np.sqrt(d)
    bias = (input_noise * rng.normal(size=(m, d))).astype(np.float32)
    return Maps(split, layers, inp, bias, [LayerFit(l, 0, 0, 0, 0, 0, 0) for l in layers], kv=kv)


def write_gguf(path, keys: dict, tensors: dict, arch: str = "llama"):
    """A small GGUF by hand: int keys as uint32, others as strings; tensors as given."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    for k, v in keys.items():
        w.add_uint32(k, v) if isinstance(v, int) else w.add_string(k, v)
    for name, data in tensors.items():
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def check_earlier_inputs(model, maps, tokens, split: int, late: list[int], n_batch: int, n_ubatch: int,
                         sinks: int, tail: int, tol: float = 1e-4, min_window: float = 1e-2) -> None:
    """Captured inputs of filled late layers = W_l h_s(t) + W_prev,l h_s(t-1) + B_l P [h_s(t-1); ..; h_s(t-W)] + b_l
    in numpy (lagged maps, window maps), h_s(t-j) being that row's split state wherever it ran (this ubatch, an
    earlier one, an exact one) and, before position 0, position 0's (the fit's convention, capture.earlier_rows).
    The window term must be at least `min_window` of a row's largest input, or the check would not see it."""
    import numpy as np

    from ridgefill.fit.capture import earlier_rows

    ctx = model.context(n_ctx=1024, n_batch=n_batch, n_ubatch=n_ubatch, threads=2, capture=[split, *late])
    ctx.set_fill("ridge")
    rows = {il: [] for il in [split, *late]}
    res = ctx.prefill(tokens, sinks=sinks, tail=tail,
                      on_chunk=lambda c, start, n: [rows[il].append(c.layer_input(il).copy()) for il in rows])
    lo, hi = res.fill_range
    assert hi > lo >= 0
    h = {il: np.concatenate(v) for il, v in rows.items()}
    h_s = h[split].astype(np.float64)
    h_prev = earlier_rows(h_s, 0, 1)
    stacked = earlier_rows(h_s, 0, maps.window_rows)[lo:hi] if maps.window_rows else None
    n_earlier = 0
    for il in late:
        j = maps.layers.index(il)
        want = h_s[lo:hi] @ maps.weights[j].T.astype(np.float64) + maps.biases[j]
        if maps.win(j) is not None:
            part = stacked @ maps.window.T.astype(np.float64) @ maps.win(j).T.astype(np.float64)
            assert (np.abs(part).max(1) / np.abs(want).max(1)).min() > min_window, "the window term is too small to test"
            want += part
            n_earlier += 1
        if maps.prev(j) is not None:
            n_earlier += 1
            w_prev = maps.prev(j).T.astype(np.float64)
            want += h_prev[lo:hi] @ w_prev
            own = want + (h_s[lo:hi] - h_prev[lo:hi]) @ w_prev
            a = max(lo, 1) - lo  # rows past position 0 must not read themselves
            off = np.abs(h[il][lo:hi] - own).max(1) / np.abs(want).max(1)
            assert off[a:].min() > 1e-3, f"layer {il}: a row read itself"
        # per row: the first row (BOS) of a fill from position 0 is hundreds of times larger than the others
        err = (np.abs(h[il][lo:hi] - want).max(1) / np.abs(want).max(1)).max()
        assert err < tol, f"layer {il}: relative error {err:.3g}"
    assert n_earlier > 0


class SharedModels:
    """Test models built once per session: a base (SmolLM2, a registry model or a synthetic shape), its
    pass-through from `split` on (layers >= split zeroed, so h_l = h_s) with identity maps, or random maps."""

    def __init__(self, root: Path, smollm2_path: Path):
        self.root, self.smollm2_path, self._built = root, smollm2_path, {}

    def _once(self, key, make):
        if key not in self._built:
            self._built[key] = make()
        return self._built[key]

    def base(self, shape: str) -> Path:
        from ridgefill.bench import synth

        if shape == "smollm2":
            return self.smollm2_path
        if shape in models.REGISTRY:
            return models.fetch_model(shape)
        return self._once(("base", shape), lambda: synth.random_model(
            shape, self.root / f"{shape}.gguf", self.smollm2_path, seed=1, weight_type="f16", n_ctx=4096))

    def passthrough_path(self, shape: str, split: int) -> Path:
        """The pass-through GGUF without maps (identity fill needs none)."""
        from ridgefill.bench import synth

        return self._once(("pt", shape, split), lambda: synth.passthrough(
            self.base(shape), split, self.root / f"{shape}-pt{split}.gguf"))

    def passthrough(self, shape: str, split: int):
        """Model: the pass-through with identity maps, so ridge fill runs the fill path too."""
        from ridgefill.bench import synth
        from ridgefill.runtime import Model

        return self._once(("pt-maps", shape, split), lambda: Model(synth.identity_maps(
            self.passthrough_path(shape, split), split, self.root / f"{shape}-pt{split}-maps.gguf")))

    def random_maps(self, shape: str, split: int, seed: int = 0, lag_every: int = 0, window: tuple[int, int] = (0, 0)):
        """(Model, Maps): the base with random, non-symmetric F32 maps (lagged ones every lag_every layers, window
        maps of `window` = (W, rank))."""
        return self._once(("rand", shape, split, seed, lag_every, window), lambda: random_maps_model(
            self.base(shape), split, self.root / f"{shape}-rand{split}-{seed}-lag{lag_every}-w{window[0]}r{window[1]}.gguf",
            seed=seed, lag_every=lag_every, window=window))


@pytest.fixture(scope="session")
def shared_models(tmp_path_factory, smollm2_path) -> SharedModels:
    return SharedModels(tmp_path_factory.mktemp("models"), smollm2_path)
