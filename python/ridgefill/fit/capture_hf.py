"""Calibration capture backend `hf`: a Hugging Face checkpoint through transformers.

Forward pre-hooks on the decoder layers read each layer's input (h_l) for the split layer
and every later layer; the statistics are the same as the llama.cpp backend's. Runs on
the GPU when one is present. Tokens come from the caller (usually the GGUF's own
tokenizer, through the bindings) so both backends see identical rows.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .capture import CaptureConfig, accumulate, check_rows, check_split, earlier_rows, update_all
from ..sources.corpus import Document
from ..format.identity import ModelIdentity
from .stats import CalibrationStats, MapInputs, Moments
from ..errors import InputError


def load_hf(path: str, gguf_file: str | None = None, dtype: str = "float32"):
    import torch
    import transformers

    kw = {"gguf_file": gguf_file} if gguf_file else {}
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), **kw)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return model.to(device).eval()


def decoder_layers(model):
    for attr in ("model.layers", "model.language_model.layers", "transformer.h"):
        obj = model
        try:
            for part in attr.split("."):
                obj = getattr(obj, part)
            return obj
        except AttributeError:
            continue
    raise InputError(f"cannot find the decoder layers of {type(model).__name__}")


def capture_hf(model, tokenize: Callable[[str], np.ndarray], bos: int | None, docs: list[Document], cfg: CaptureConfig,
               identity: ModelIdentity, progress: Callable[[int], None] | None = None) -> CalibrationStats:
    import torch

    check_split(identity, cfg.split)
    layers = decoder_layers(model)
    if len(layers) != identity.n_layer:
        raise InputError(f"HF model has {len(layers)} layers, the GGUF identity says {identity.n_layer}")
    wanted = list(range(cfg.split, identity.n_layer))
    grabbed: dict[int, torch.Tensor] = {}

    def hook(il):
        def pre(_module, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            grabbed[il] = h[0].detach().float().cpu()
        return pre

    handles = [layers[il].register_forward_pre_hook(hook(il), with_kwargs=True) for il in wanted]
    device = next(model.parameters()).device

    def process(w: np.ndarray, moms: list[tuple[MapInputs, Moments]]) -> None:
        with torch.no_grad():
            model(torch.tensor(w[None, :].astype(np.int64), device=device))
        update_all(lambda il: grabbed[il].numpy()[cfg.sinks:], lambda s, n: earlier_rows(grabbed[s].numpy(), cfg.sinks, n),
                   moms)

    try:
        stats, = accumulate([CalibrationStats(identity, cfg.split)], docs, cfg, tokenize, bos, "hf", process, progress)
    finally:
        for h in handles:
            h.remove()
    return check_rows(stats, cfg)
