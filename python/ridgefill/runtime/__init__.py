"""Running a GGUF through the fork: the bindings' wrapper and split prefill as one `Context`.

`Model` loads a (possibly augmented) GGUF; `Context` decodes, sets the fill mode, split, range
and routing, reads and overwrites cached rows, and runs a whole prompt's split prefill (head,
hook, tail) and the scoring on top of it (`split_prefill`, whose functions take a Context).
"""

from .context import Context, supported_archs
from .model import ALL_LAYERS, Model, add_rpc_servers, version
from .split_prefill import PrefillResult, fill_range, head_stop, nothing_filled

__all__ = ["ALL_LAYERS", "Context", "Model", "PrefillResult", "add_rpc_servers", "fill_range", "head_stop", "nothing_filled",
           "supported_archs", "version"]
