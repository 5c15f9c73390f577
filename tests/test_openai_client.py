"""llama-server's OpenAI-compatible API driven by the official `openai` client, with RidgeFill fields
passed the way a user passes them: extra_body={"ridgefill": ...}."""

import pytest

from ridgefill.serve.server import LlamaServer

pytestmark = pytest.mark.slow

SPLIT, SINKS, TAIL = 15, 4, 32
FILL = ["--ridgefill", "identity", "--ridgefill-split", str(SPLIT), "--ridgefill-sink", str(SINKS),
        "--ridgefill-tail", str(TAIL)]


@pytest.fixture(scope="module")
def client(smollm2_path):
    openai = pytest.importorskip("openai")
    with LlamaServer(smollm2_path, FILL, ctx=2048, threads=2) as srv:
        yield openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=600)


@pytest.fixture(scope="module")
def messages(sample_text):
    return [{"role": "user", "content": sample_text[:2400] + "\n\nIn one word: what is this text about?"}]


def _timings(resp) -> dict:
    return (resp.model_extra or {})["timings"]


def test_chat_completion_fills_and_reports_its_rows(client, messages):
    resp = client.chat.completions.create(model="m", messages=messages, max_tokens=4, temperature=0.0,
                                          extra_body={"ridgefill": "identity", "cache_prompt": False})
    t = _timings(resp)
    n = resp.usage.prompt_tokens
    assert n > SINKS + TAIL + 100 and t["prompt_n"] == n
    assert (t["ridgefill_filled_n"], t["ridgefill_full_n"]) == (n - SINKS - TAIL, SINKS + TAIL)
    assert resp.choices[0].message.content


def test_exact_request_fills_nothing_and_equals_itself(client, messages):
    kw = dict(model="m", messages=messages, max_tokens=8, temperature=0.0)
    a = client.chat.completions.create(**kw, extra_body={"ridgefill": "exact", "cache_prompt": False})
    b = client.chat.completions.create(**kw, extra_body={"ridgefill": "exact", "cache_prompt": False})
    assert "ridgefill_filled_n" not in _timings(a) and a.choices[0].message.content == b.choices[0].message.content


def test_streaming_chat_reports_the_fill_in_its_last_chunk(client, messages):
    stream = client.chat.completions.create(model="m", messages=messages, max_tokens=4, temperature=0.0, stream=True,
                                            extra_body={"ridgefill": "identity", "ridgefill_tail": 64,
                                                        "cache_prompt": False})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    t = next(_timings(c) for c in reversed(chunks) if "timings" in (c.model_extra or {}))
    assert text and t["ridgefill_filled_n"] == t["prompt_n"] - SINKS - 64


def test_a_mode_the_server_was_not_started_with_is_a_400(client, messages):
    import openai

    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="m", messages=messages, max_tokens=1, extra_body={"ridgefill": "ridge"})
    assert err.value.status_code == 400 and "not enabled on this server" in str(err.value)
    with pytest.raises(openai.BadRequestError, match="must be one of 'exact', 'identity', 'ridge'"):
        client.chat.completions.create(model="m", messages=messages, max_tokens=1, extra_body={"ridgefill": "fast"})
    ok = client.chat.completions.create(model="m", messages=messages, max_tokens=1, extra_body={"ridgefill": "exact"})
    assert ok.choices  # the server stays up
