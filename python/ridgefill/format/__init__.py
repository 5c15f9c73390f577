"""The augmented GGUF: a base GGUF plus ridge maps, routing statistics and ridgefill.* metadata.

Owns every key and tensor name (`keys`, the one definition `write`, `read`, `validate` and
`inspection` share), GGUF I/O on llama.cpp's own `gguf` package (`gguf_io`), which model a file
is (`identity`), what a fit produces and a file stores (`maps`: Maps, LayerFit, RouteStats, Provenance),
writing (`write.pack`: an augmented GGUF; `write.write_maps`: a maps file beside an unchanged base, llama.cpp's
adapter convention; `maps_file`: one into the other), reading maps back (`read`), the loader's checks in
Python (`validate`) and `ridgefill inspect` (`inspection`). The fork's loader reads the same names.
"""

from .gguf_io import GGUFError
from .identity import ModelIdentity, has_maps, identity_of
from .inspection import inspect
from .read import earlier_row_products, kv_products, n_lagged, read_maps, read_prev_maps, read_route, read_window
from .write import Defaults, PackError, pack, write_maps
from .maps_file import OtherBase, is_maps_file, unpack, pack as pack_maps_file

__all__ = ["Defaults", "GGUFError", "ModelIdentity", "PackError", "earlier_row_products", "has_maps", "identity_of", "inspect", "n_lagged",
           "pack", "read_maps", "write_maps", "OtherBase", "is_maps_file", "unpack", "pack_maps_file", "read_prev_maps", "read_route", "read_window"]
