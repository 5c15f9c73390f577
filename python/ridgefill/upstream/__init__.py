"""The fork: the pinned upstream llama.cpp, the patch series over it, and the tools that keep it a design.

`tree` fetches and verifies upstream, applies ggml-patches/ as one commit per patch in
build/llama.cpp and exports edits back; `series_check` builds every prefix of the series;
`series_doc` generates the patch table of docs/series.md; `rebase` moves the series to another
upstream. `cli` is `ridgefill upstream` and `python -m ridgefill.upstream` (CMake calls it at
configure time, so nothing here needs the built extension).
"""
