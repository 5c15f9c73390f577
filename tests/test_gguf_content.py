"""gguf_io.content_sha256: a digest of what a GGUF holds (keys, tensors), not of its bytes."""

import numpy as np

from conftest import write_gguf as _gguf
from ridgefill.fetch import sha256_file
from ridgefill.format.gguf_io import content_sha256

W = np.arange(12, dtype=np.float32).reshape(3, 4)


def test_an_added_tensor_and_key_change_the_file_not_the_content_without_them(tmp_path):
    a = _gguf(tmp_path / "a.gguf", {"x.n": 3}, {"w": W})
    b = _gguf(tmp_path / "b.gguf", {"x.n": 3, "x.default": 7}, {"w": W, "extra.stats": np.ones(4, np.float32)})
    assert sha256_file(a) != sha256_file(b)
    assert content_sha256(a) != content_sha256(b)
    assert content_sha256(a) == content_sha256(b, ["x.default"], lambda name: name.startswith("extra."))
    assert content_sha256(a) == content_sha256(_gguf(tmp_path / "again.gguf", {"x.n": 3}, {"w": W}))


def test_any_change_of_a_value_or_a_tensor_shows(tmp_path):
    base = content_sha256(_gguf(tmp_path / "a.gguf", {"x.n": 3, "x.s": "ab"}, {"w": W}))
    changed = [
        ({"x.n": 4, "x.s": "ab"}, {"w": W}),
        ({"x.n": 3, "x.s": "abc"}, {"w": W}),
        ({"x.n": 3, "x.s": "ab"}, {"w": np.where(W == 5, np.nextafter(W, 99), W)}),  # one element, one ulp
        ({"x.n": 3, "x.s": "ab"}, {"w": W.reshape(4, 3)}),  # same bytes, other shape
        ({"x.n": 3, "x.s": "ab"}, {"v": W}),  # same data, other name
        ({"x.n": 3, "x.s": "ab"}, {"w": W.astype(np.float16)}),
    ]
    digests = {content_sha256(_gguf(tmp_path / f"c{i}.gguf", k, t)) for i, (k, t) in enumerate(changed)}
    assert base not in digests and len(digests) == len(changed)


def test_a_settled_file_is_parsed_once_and_any_change_is_read_again(tmp_path):
    import os
    import time

    from ridgefill.format.gguf_io import field, open_gguf

    path = _gguf(tmp_path / "m.gguf", {"x.n": 3}, {"w": W})
    assert open_gguf(path) is not open_gguf(path)  # written just now: parsed every time
    old = time.time() - 60
    os.utime(path, (old, old))
    settled = open_gguf(path)
    assert open_gguf(path) is settled and field(settled, "x.n") == 3  # unchanged for a while: one parse
    _gguf(path, {"x.n": 5}, {"w": W})  # rewritten in place, same size: a new mtime
    assert field(open_gguf(path), "x.n") == 5
    os.utime(path, (old - 1, old - 1))  # settled again, at another time
    assert field(open_gguf(path), "x.n") == 5 and open_gguf(path) is open_gguf(path)
