"""Writing output files so that a reader never sees a partial one.

Every file the toolkit produces (augmented GGUFs, maps, statistics, fetched models) is written
to a hidden `.NAME.PID.XXXX.part` beside it and renamed over NAME only when complete. A failed
write, Ctrl-C (SIGINT) or SIGTERM removes the `.part`; a `.part` left by a killed process
(SIGKILL, power loss) is removed by the next write to the same NAME.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, BinaryIO, Iterator


@contextmanager
def atomic_output(out: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `out`; it becomes `out` if the block completes, else it is removed."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_parts(out)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.{os.getpid()}.", suffix=".part")
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; the output gets the usual mode
    try:
        with _sigterm_raises():
            yield Path(tmp)
            os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_from(out: str | os.PathLike, writer: Callable[[BinaryIO], None]) -> None:
    """Write `out` by calling `writer` on a binary file object, atomically."""
    with atomic_output(out) as tmp, open(tmp, "wb") as f:
        writer(f)


def save_npz(out: str | os.PathLike, fmt: str, meta: dict, arrays: dict) -> Path:
    """Arrays plus a JSON `meta` (with "format": fmt) as one npz, atomically."""
    import json

    import numpy as np

    entries = {**arrays, "meta": np.array(json.dumps({"format": fmt, **meta}))}
    atomic_write_from(out, lambda f: np.savez(f, **entries))
    return Path(out)


def load_npz(path: str | os.PathLike, fmt: str) -> tuple[dict, dict]:
    """(meta, arrays) of a file written by save_npz with format `fmt`; ValueError saying what is wrong otherwise."""
    import json

    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            if meta.get("format") != fmt:
                raise ValueError(f"not a {fmt} file (format {meta.get('format')!r})")
            return meta, {k: np.array(data[k]) for k in data.files if k != "meta"}
    except (OSError, KeyError, EOFError) as err:
        raise ValueError(str(err)) from None


def remove_stale_parts(out: str | os.PathLike) -> list[Path]:
    """Remove the `.part` files of `out` whose writer process is gone; return them."""
    out = Path(out)
    removed = []
    for part in out.parent.glob(f".{out.name}.*.part"):
        pid = part.name[len(out.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and _alive(int(pid)):
            continue
        part.unlink(missing_ok=True)
        removed.append(part)
    return removed


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into SystemExit while the block runs, so cleanup code runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def _raise(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
