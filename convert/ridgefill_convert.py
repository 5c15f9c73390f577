#!/usr/bin/env python3
"""Convert entry point: BASE.gguf + fitted maps -> augmented GGUF.

    python convert/ridgefill_convert.py BASE.gguf --maps MAPS.npz -o OUT.gguf [--type f16|f32]

Same as `ridgefill convert`. Maps come from `ridgefill fit BASE --split S --maps-out MAPS.npz`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from ridgefill.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["convert", *sys.argv[1:]]))
