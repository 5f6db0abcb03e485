"""Model (the model level) on tiny-qwen2 and the mock: decode and logits, sequence isolation,
copy then diverge, no room then retry, KV stats and the prefix cache, the abort callback, and
the mock's documented logits (the registry routes by model_type, also through the CLI)."""

import subprocess

import pytest

from conftest import CLI, MOCK, TINY, argmax
from llaisys import LlaisysError, Model

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def mock_logits(history, vocab=151936):
    """src/model/mock.c's formula, written again from its comment."""
    h = GOLDEN
    for j, t in enumerate(history):
        h = mix64(h ^ (((t + 1) * GOLDEN + j) & M64))
    return [(mix64(h ^ (((v + 1) * 0xD6E8FEB86659FD93) & M64)) >> 40) * 2.0 ** -21 - 4.0
            for v in range(vocab)]


@pytest.fixture(scope="module")
def tiny():
    with Model(TINY, n_ctx=256, kv_tokens=1024, n_seq_max=4, threads=1) as m:
        yield m


def fresh_logits(ids):
    with Model(TINY, n_ctx=256, kv_tokens=512, n_seq_max=1, threads=1) as r:
        assert r.decode(ids) == 0
        return r.logits()


def test_properties_tokenizer(tiny):
    assert tiny.type == "qwen2" and tiny.n_vocab == 151936 and tiny.n_ctx == 256
    assert tiny.n_seq_max == 4
    ids = tiny.tokenize("Hello world")
    assert ids == [151646, 9707, 1879]
    assert tiny.detokenize(ids) == "Hello world"
    assert tiny.is_eos(151643) and not tiny.is_eos(9707)


def test_isolation_and_removal(tiny):
    tiny.kv_seq_rm(-1)
    ids = tiny.tokenize("Once upon a time, in a land far away")
    n = len(ids)
    # the same prompt in sequences 0 and 1, rows interleaved
    toks = [t for t in ids for _ in (0, 1)]
    seqs = [s for _ in ids for s in (0, 1)]
    assert tiny.decode(toks, seqs, logits=[i >= 2 * n - 2 for i in range(2 * n)]) == 0
    assert tiny.n_outputs == 2 and tiny.output_ids == [2 * n - 2, 2 * n - 1]
    assert tiny.logits(2 * n - 2) == tiny.logits(2 * n - 1)
    assert tiny.logits(-1) == fresh_logits(ids)
    assert tiny.kv_seq_rm(1) == 0 and tiny.kv_seq_pos_max(1) == -1
    assert tiny.decode([42], 0) == 0
    assert tiny.logits() == fresh_logits(ids + [42])
    assert tiny.kv_stats()["seq_tokens"] == n + 1


def test_copy_then_diverge(tiny):
    tiny.kv_seq_rm(-1)
    ids = list(range(1000, 1020))
    assert tiny.decode(ids, 0) == 0
    used = tiny.kv_stats()["used"]
    assert tiny.kv_seq_cp(0, 1) == 0
    assert tiny.kv_stats()["used"] == used  # shared blocks
    assert tiny.decode([7, 8], [0, 1], logits=True) == 0
    assert tiny.logits(0) == fresh_logits(ids + [7])
    assert tiny.logits(1) == fresh_logits(ids + [8])
    assert tiny.kv_seq_cp(0, 2, 0, 5) == 0 and tiny.kv_seq_pos_max(2) == 4
    assert tiny.kv_seq_keep(2) == 0 and tiny.kv_seq_pos_max(0) == -1


def test_ranges_and_errors(tiny):
    tiny.kv_seq_rm(-1)
    assert tiny.decode(list(range(10)), 0) == 0
    assert tiny.kv_seq_rm(0, 4, 4) == 3  # empty range
    assert tiny.kv_seq_rm(0, 50) == 3    # no hit
    with pytest.raises(LlaisysError, match="hole") as e:
        tiny.kv_seq_rm(0, 2, 5)
    assert e.value.status_name == "invalid position"
    with pytest.raises(LlaisysError) as e:
        tiny.kv_seq_add(0, 0, 5, 2)
    assert e.value.status_name == "unsupported"
    with pytest.raises(LlaisysError, match="sequence 9"):
        tiny.decode([1], 9)
    with pytest.raises(LlaisysError, match="contiguous"):
        tiny.decode([1], 0, pos=[3])
    with pytest.raises(LlaisysError, match="vocabulary"):
        tiny.decode([10 ** 7], 0)
    with pytest.raises(LlaisysError, match="did not ask"):
        tiny.decode([1, 2], 0)
        tiny.logits(0)
    assert tiny.kv_seq_pos_max(0) == 11
    assert tiny.kv_seq_rm(0, 8) == 0 and tiny.kv_seq_pos_max(0) == 7


def test_no_room_then_retry():
    with Model(TINY, n_ctx=256, kv_tokens=64, n_seq_max=2, threads=1) as m:
        assert m.decode(list(range(40)), 0) == 0
        before = m.kv_stats()
        assert m.decode(list(range(100, 130)), 1) == 1
        assert m.kv_seq_pos_max(1) == -1 and m.kv_stats()["used"] == before["used"]
        m.kv_seq_rm(0)
        assert m.decode(list(range(100, 130)), 1) == 0
        assert m.logits() == fresh_logits(list(range(100, 130)))


def test_prefix_cache_and_abort():
    with Model(TINY, n_ctx=256, kv_tokens=256, n_seq_max=2, threads=1) as m:
        ids = list(range(2000, 2040))
        assert m.decode(ids, 0) == 0
        first = m.logits()
        m.kv_seq_rm(0)
        assert m.kv_stats()["cached"] == 32
        assert m.decode(ids, 1) == 0
        assert m.kv_stats()["prefix_hits"] == 32 and m.logits() == first
        with pytest.raises(LlaisysError) as e:
            m.kv_reset_prefix_cache()
        assert e.value.status_name == "busy"
        m.kv_seq_rm(-1)
        m.kv_reset_prefix_cache()
        assert m.kv_stats()["cached"] == 0
        calls = []
        m.set_abort_callback(lambda: calls.append(1) or True)
        assert m.decode([1, 2, 3], 0) == 2 and m.kv_seq_pos_max(0) == -1 and calls
        m.set_abort_callback(None)
        assert m.decode([1, 2, 3], 0) == 0


def test_mock_model_and_cli_route_by_model_type():
    with Model(MOCK, n_ctx=64, kv_tokens=128, n_seq_max=2, threads=1) as m:
        assert m.type == "mock"
        assert m.decode([1, 2, 3], 0) == 0
        want = mock_logits([1, 2, 3])
        got = m.logits()
        assert list(got) == want
        assert m.kv_seq_cp(0, 1, -1, 2) == 0 and m.decode([500], 1) == 0
        assert list(m.logits()) == mock_logits([1, 2, 500])
    # llaisys-cli generate on the mock directory runs the mock family
    out = subprocess.run([CLI, "generate", "--model", MOCK, "--ids", "1 2 3", "--temp", "0",
                          "-n", "3", "--print-ids"], check=True, capture_output=True, text=True)
    hist, greedy = [1, 2, 3], []
    for _ in range(3):
        t = argmax(mock_logits(hist))
        greedy.append(t)
        hist.append(t)
    assert [int(x) for x in out.stdout.split()] == greedy


def test_mock_engine():
    from llaisys import LLM, SamplingParams
    with LLM(MOCK, threads=1, ctx=128) as llm:
        out = llm.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=3))[0]
        assert out.token_ids == [84987, 51834, 51983]
        assert llm.config["model_type"] == "mock"


def test_closed_model_refuses_use():
    m = Model(TINY, n_ctx=64, kv_tokens=128, n_seq_max=1, threads=1)
    assert m.tokenize("hello")
    m.close()
    m.close()  # a second close does nothing
    with pytest.raises(ValueError, match="the model is closed"):
        m.tokenize("hello")
    with pytest.raises(ValueError, match="the model is closed"):
        m.decode([1, 2])
