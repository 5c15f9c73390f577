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
