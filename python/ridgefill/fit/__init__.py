"""Fitting the maps: calibration text -> sufficient statistics -> closed-form ridge maps -> augmented GGUF.

`windows` plans which tokens a capture runs; `capture` (llama.cpp, through the runtime) and
`capture_hf` (transformers) stream each layer's input into `stats` (sums in float64, mergeable
across shards); `ridge` solves the maps and picks λ and the identity blend on held-out rows (into format.maps' Maps);
`route` turns the split layer's moments into routing statistics; `pipeline` runs it end to end
and packs the result with `ridgefill.format`.
"""
