"""The calibration text of memlab's int8 MiniLM paths (``minilm-openvino-int8``'s post-training
quantisation, ``minilm-onnx-int8-sq``'s smoothing): paragraphs of standard-library docstrings,
never evaluation text. Its own module because both quantisers read it
(:mod:`~memlab.signals.embedders.openvino_int8` and :mod:`~memlab.signals.embedders.onnx_minilm`).
"""

from __future__ import annotations

import importlib
import inspect
import re

__all__ = ["CALIBRATION_MODULES", "calibration_texts"]

# standard-library modules whose documentation is the calibration text: English prose of
# sentence-to-paragraph length that is in no evaluation data set
CALIBRATION_MODULES = ("argparse", "calendar", "collections", "csv", "datetime", "decimal",
                       "email", "fractions", "functools", "heapq", "http.client", "itertools",
                       "json", "logging", "pathlib", "random", "re", "sqlite3", "statistics",
                       "string", "textwrap", "threading", "unittest", "urllib.parse", "zipfile")


def calibration_texts(limit: int = 300) -> list[str]:
    """Calibration text for the int8 quantisation: paragraphs of standard-library docstrings
    (``CALIBRATION_MODULES``, in a fixed order, every n-th of them up to ``limit``) and the
    first 60 characters of a quarter of them (short texts, like queries).

    Deterministic for a given Python version, whatever was imported before (the quantised
    model is named by the texts' digest, so another Python's text gives another file, never a
    mixed one).

    Examples
    --------
    >>> texts = calibration_texts(40)
    >>> len(texts) > 40 and all(isinstance(t, str) and t for t in texts)
    True
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be an integer >= 1, got {limit!r}")
    paragraphs: list[str] = []
    for module_name in CALIBRATION_MODULES:
        module = importlib.import_module(module_name)
        # the module and what it defines itself (not what it imported, nor submodules that
        # other imports happened to load: those would make the text depend on import order)
        objects = [module] + [getattr(module, n) for n in sorted(vars(module))
                              if not n.startswith("_")]
        for obj in objects:
            if obj is not module and not (
                    (inspect.isclass(obj) or inspect.isfunction(obj))
                    and getattr(obj, "__module__", None) == module.__name__):
                continue
            doc = inspect.getdoc(obj)
            for para in re.split(r"\n\s*\n", doc or ""):
                text = " ".join(para.split())
                if 20 <= len(text) <= 1200 and not text.startswith((">>>", "..", "|")):
                    paragraphs.append(text)
    unique = list(dict.fromkeys(paragraphs))
    picked = unique[::max(1, len(unique) // limit)][:limit]
    return picked + [t[:60] for t in picked[:max(1, limit // 4)]]
