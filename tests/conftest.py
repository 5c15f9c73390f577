from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from ridgefill import models

BIN = Path(sys.executable).parent


def tool(name: str) -> Path:
    """A fork binary installed into the venv by the build."""
    path = BIN / name
    if not path.exists():
        found = shutil.which(name)
        if found is None:
            pytest.fail(f"{name} is not installed; run `make setup`")
        path = Path(found)
    return path


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
