from __future__ import annotations

from pathlib import Path

import pytest

from ridgefill import models
from ridgefill.server import ServerError, tool_path


def tool(name: str) -> Path:
    """A fork binary installed into the venv by the build."""
    try:
        return tool_path(name)
    except ServerError as err:
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


def random_maps_model(base, split: int, out: Path, seed: int = 0, map_type: str = "f32"):
    """`base` + random, non-symmetric F32 maps (W = I + noise, b = noise) at `split`: (Model, Maps).

    Far from the identity, so a wrong or transposed map shows; easy to recompute in numpy.
    """
    import numpy as np

    from ridgefill import pack
    from ridgefill.ridge import LayerFit, Maps
    from ridgefill.runtime import Model
    from ridgefill.stats import Provenance

    ident = pack.identity_of(base)
    rng = np.random.default_rng(seed)
    layers = list(range(split + 1, ident.n_layer))
    d = ident.n_embd
    w = (np.eye(d) + 0.05 * rng.normal(size=(len(layers), d, d))).astype(np.float32)
    b = (0.1 * rng.normal(size=(len(layers), d))).astype(np.float32)
    maps = Maps(split, layers, w, b, [LayerFit(l, 0, 0, 0, 0, 0, 0) for l in layers])
    return Model(pack.pack(base, maps, ident, Provenance(), out, map_type=map_type)), maps
