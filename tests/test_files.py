"""Atomic outputs: no partial file at OUT, no `.part` left behind by errors, signals or kills."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from ridgefill.files import atomic_output, atomic_write_from, remove_stale_parts


def _parts(out):
    return sorted(out.parent.glob(f".{out.name}.*.part"))


def test_complete_write_renames_and_leaves_no_part(tmp_path):
    out = tmp_path / "a.bin"
    atomic_write_from(out, lambda f: f.write(b"data"))
    assert out.read_bytes() == b"data" and not _parts(out)
    mask = os.umask(0)
    os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~mask


def test_failed_write_keeps_the_old_output_and_removes_the_part(tmp_path):
    out = tmp_path / "a.bin"
    out.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_output(out) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("disk full")
    assert out.read_bytes() == b"old" and not _parts(out)


def test_stale_parts_of_dead_writers_are_removed_live_ones_kept(tmp_path):
    out = tmp_path / "m.gguf"
    # pid_max - 1 is free unless the machine has run through every pid
    free_pid = int(open("/proc/sys/kernel/pid_max").read()) - 1
    stale = tmp_path / f".m.gguf.{free_pid}.abc.part"
    legacy = tmp_path / ".m.gguf.xyz.part"          # older naming without a pid
    live = tmp_path / f".m.gguf.{os.getppid()}.def.part"
    other = tmp_path / f".n.gguf.{free_pid}.abc.part"
    for p in (stale, legacy, live, other):
        p.write_bytes(b"x")
    removed = remove_stale_parts(out)
    assert sorted(removed) == sorted([stale, legacy])
    assert live.exists() and other.exists()
    atomic_write_from(out, lambda f: f.write(b"ok"))
    assert _parts(out) == [live]


WRITER = r"""
import signal, sys, time
from ridgefill.cli.commands import _exit_on_sigterm
from ridgefill.files import atomic_output
_exit_on_sigterm()
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as in a terminal, even if started in the background
with atomic_output(sys.argv[1]) as tmp:
    tmp.write_bytes(b"partial")
    print("writing", flush=True)
    time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_write_removes_the_part(tmp_path, sig):
    out = tmp_path / "out.gguf"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(out)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    assert len(_parts(out)) == 1
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert proc.returncode != 0
    assert not out.exists() and not _parts(out)


@pytest.mark.slow
def test_convert_killed_mid_write_leaves_nothing_and_the_next_run_cleans_up(smollm2_path, tmp_path):
    """The real entry point: convert/ridgefill_convert.py, SIGTERM while the augmented GGUF is written."""
    from ridgefill import format as fmt
    from ridgefill.fit import ridge
    from ridgefill.fit.ridge import LayerFit, Maps
    from ridgefill.fit.stats import Provenance

    ident = fmt.identity_of(smollm2_path)
    layers = list(range(10, ident.n_layer))
    d = ident.n_embd
    maps = Maps(9, layers, np.tile(np.eye(d, dtype=np.float32), (len(layers), 1, 1)),
                np.zeros((len(layers), d), np.float32), [LayerFit(l, 0, 0, 0, 0, 0, 0) for l in layers])
    npz = ridge.save_maps(tmp_path / "maps.npz", maps, ident, Provenance())
    out = tmp_path / "aug.gguf"
    script = os.path.join(os.path.dirname(__file__), "..", "convert", "ridgefill_convert.py")
    cmd = [sys.executable, script, str(smollm2_path), "--maps", str(npz), "-o", str(out), "--type", "f32"]
    proc = subprocess.Popen(cmd)
    deadline = time.monotonic() + 120
    while not _parts(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert _parts(out), "the write finished before it could be interrupted"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode != 0 and not out.exists() and not _parts(out)

    # a writer killed outright (SIGKILL) leaves its .part: the next run to the same output removes it
    proc = subprocess.Popen(cmd)
    while not _parts(out) and proc.poll() is None:
        time.sleep(0.005)
    proc.kill()
    proc.wait()
    assert _parts(out)
    subprocess.run(cmd, check=True, capture_output=True)
    assert out.exists() and not _parts(out)
    assert fmt.inspect(out)["loads"]
