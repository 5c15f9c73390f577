"""Every name of the augmented GGUF: the ridgefill.* keys, the map and routing tensors, their types.

The fork's loader (patch "model : load RidgeFill maps, previous-row maps and routing statistics")
reads the same names; `validate` checks a file against them and `write` writes them.
"""

from __future__ import annotations

import gguf
import numpy as np

FORMAT_VERSION = 1  # the value of FORMAT_VERSION_KEY this package writes and the fork reads

PREFIX = "ridgefill."
KEY = PREFIX + "{}"

# metadata keys
FORMAT_VERSION_KEY = KEY.format("format_version")  # uint32
SPLIT_LAYER = KEY.format("split_layer")            # uint32: the maps' split layer s
SINK_ROWS = KEY.format("sink_rows")                # uint32: default sink rows (optional)
TAIL_ROWS = KEY.format("tail_rows")                # uint32: default tail rows (optional)
ROUTE_FRACTION = KEY.format("route_fraction")      # float32 in [0, 1]: default routed share (optional)
LAMBDA = KEY.format("lambda")                      # [float] per late layer, from s + 1
HELDOUT_R2 = KEY.format("heldout_r2")
HELDOUT_R2_IDENTITY = KEY.format("heldout_r2_identity")
IDENTITY_BLEND = KEY.format("identity_blend")
K_ERR = KEY.format("heldout_k_err")                # [float] input maps' held-out key error (fit/key_space.py)
KV_K_ERR = KEY.format("kv_heldout_k_err")          # [float] K/V maps' held-out K and V errors, where fitted (-1: none)
KV_V_ERR = KEY.format("kv_heldout_v_err")
CALIB_TOKENS = KEY.format("calib_tokens")          # uint64
CORPUS_HASH = KEY.format("corpus_hash")            # string
BASE_SHA256 = KEY.format("base_sha256")            # string: sha256 of the base GGUF file

# a maps file (maps beside an unchanged model, as a LoRA adapter is): general.type = adapter, adapter.type =
# ridgefill, general.architecture the base's, and the base it was fitted for
ADAPTER_TYPE = "ridgefill"
BASE_BLOCK_COUNT = KEY.format("base.block_count")            # uint32
BASE_EMBEDDING_LENGTH = KEY.format("base.embedding_length")  # uint32
BASE_CONTEXT_LENGTH = KEY.format("base.context_length")      # uint32
BASE_VOCAB_SIZE = KEY.format("base.vocab_size")              # uint32: entries of tokenizer.ggml.tokens
BASE_WEIGHTS_HASH = KEY.format("base.weights_hash")  # string: FNV-1a 64 of the 1-D F32 tensors (quantization keeps them)
BASE_LAYOUT_HASH = KEY.format("base.layout_hash")    # string: FNV-1a 64 of every tensor's name, type and shape

# per-layer statistics: inspect's name -> the key (a list that starts at layer s + 1)
PER_LAYER = {"lambda": LAMBDA, "r2_ridge": HELDOUT_R2, "r2_identity": HELDOUT_R2_IDENTITY, "blend": IDENTITY_BLEND,
             "k_err": K_ERR, "kv_k_err": KV_K_ERR, "kv_v_err": KV_V_ERR}

# tensors (ggml ne = {d_in, d_out}; numpy shape (d_out, d_in))
MAP_WEIGHT = "blk.{}.ridge_map.weight"
MAP_BIAS = "blk.{}.ridge_map.bias"
MAP_PREV = "blk.{}.ridge_map_prev.weight"  # a lagged map's weight on the previous row's split state
# window maps: on the split layer, a projection (rank, W*d) of the split states of rows t-1..t-W stacked
# (ggml ne {W*d, rank}); per late layer, the map (d, rank) of its columns
WINDOW = "blk.{}.ridge_window.weight"
MAP_WINDOW = "blk.{}.ridge_map_window.weight"
MAX_WINDOW = 16  # hparams.rf_max_window
# K/V maps, on the split layer only, in place of the per-layer maps: ggml ne {d, rows}, rows every later layer's
# K (before RoPE) then V widths in layer order (numpy (rows, d)); an F32 bias (rows); optionally a lagged weight
KV_WEIGHT = "blk.{}.ridge_kv.weight"
KV_BIAS = "blk.{}.ridge_kv.bias"
KV_PREV = "blk.{}.ridge_kv_prev.weight"
MAX_LAYERS = 512  # llama.cpp's LLAMA_MAX_LAYERS: its loader refuses a model of more
MAP_KINDS = ("input", "kv")  # what `pack` writes: per-layer input maps or the split layer's K/V maps
ROUTE_MEAN = "blk.{}.ridge_route.mean"     # on the split layer only
ROUTE_WHITEN = "blk.{}.ridge_route.whiten"
MAP_SUFFIXES = ("ridge_map.weight", "ridge_map.bias", "ridge_map_prev.weight", "ridge_map_window.weight")

MAP_TYPES = {"f32": np.float32, "f16": np.float16}  # what `pack` writes a map weight as
# the loader's supported set (llama_rf_map_type_supported); each is tested through the fill path
MAP_WEIGHT_TYPES = (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16)


def is_maps_tensor(tensor_name: str) -> bool:
    """A RidgeFill tensor (maps, window, routing statistics): `blk.{l}.ridge_*`, as the fork's loader tells them."""
    parts = tensor_name.split(".")
    return len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit() and parts[2].startswith("ridge_")


def layer_of(tensor_name: str) -> int:
    """The layer of a `blk.{l}.*` tensor name."""
    return int(tensor_name.split(".")[1])
