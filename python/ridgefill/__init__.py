"""RidgeFill: split prefill for llama.cpp with closed-form ridge maps."""

__version__ = "0.1.0"
