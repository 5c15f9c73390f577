"""Pinned inputs: verified registry downloads (`fetch`), the model registry (`models`), calibration
and evaluation text (`corpus`, `corpus_synthetic`) and Hugging Face checkpoints turned into GGUFs
with llama.cpp's own converter (`hf_convert`). Everything here installs offline, by sha256.
"""
