"""The Porter stemmer (M. F. Porter, 1980, "An algorithm for suffix stripping").

Written here rather than taken from NLTK or snowballstemmer so that the base install stays on
numpy/scipy/pandas/networkx/matplotlib; the tests check it word for word against
snowballstemmer's ``porter`` algorithm. Stems are cached per word (a plain dict, which is faster
than ``functools.lru_cache`` on this hot path: bulk ingest stems every token).
"""

from __future__ import annotations

__all__ = ["porter_stem"]

_VOWELS = frozenset("aeiou")
_CACHE: dict[str, str] = {}
_CACHE_LIMIT = 500_000


def _is_consonant(word: str, i: int) -> bool:
    """Porter's consonant test at ``word[i]``, without recursion.

    A ``y`` is a consonant at the start and after a vowel, a vowel after a consonant; in a run
    of ``y`` letters the answer alternates from the letter before the run. Walking back over the run
    keeps the cost linear in its length (the recursive definition needed one frame per ``y``
    and overflowed the stack on a word of ~1,000 of them).
    """
    ch = word[i]
    if ch in _VOWELS:
        return False
    if ch != "y":
        return True
    start = i
    while start > 0 and word[start - 1] == "y":
        start -= 1
    first = start == 0 or word[start - 1] in _VOWELS  # the run's first y: consonant?
    return first if (i - start) % 2 == 0 else not first


def _consonants(word: str) -> list[bool]:
    """:func:`_is_consonant` of every position, in one pass."""
    out: list[bool] = []
    previous = False  # the letter before is a consonant (vacuously false at the start)
    for i, ch in enumerate(word):
        if ch in _VOWELS:
            previous = False
        elif ch == "y":
            previous = i == 0 or not previous
        else:
            previous = True
        out.append(previous)
    return out


def _measure(stem: str) -> int:
    """m in [C](VC)^m[V]: the number of vowel-consonant sequences."""
    m = 0
    previous_vowel = False
    for consonant in _consonants(stem):
        if consonant and previous_vowel:
            m += 1
        previous_vowel = not consonant
    return m


def _has_vowel(stem: str) -> bool:
    return not all(_consonants(stem))


def _double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _is_consonant(word, len(word) - 1)


def _cvc(word: str) -> bool:
    """consonant-vowel-consonant ending, the last not w, x or y."""
    return (len(word) >= 3 and _is_consonant(word, len(word) - 3)
            and not _is_consonant(word, len(word) - 2) and _is_consonant(word, len(word) - 1)
            and word[-1] not in "wxy")


def _replace(word: str, suffix: str, replacement: str, min_measure: int) -> str | None:
    """``word`` with ``suffix`` replaced when the stem's measure exceeds ``min_measure``;
    None when the suffix does not match (so rule lists stop at the first matching suffix)."""
    if not word.endswith(suffix):
        return None
    stem = word[:len(word) - len(suffix)]
    return stem + replacement if _measure(stem) > min_measure else word


_STEP2 = (("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"),
          ("izer", "ize"), ("abli", "able"), ("alli", "al"), ("entli", "ent"), ("eli", "e"),
          ("ousli", "ous"), ("ization", "ize"), ("ation", "ate"), ("ator", "ate"),
          ("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous"),
          ("aliti", "al"), ("iviti", "ive"), ("biliti", "ble"))
_STEP3 = (("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"),
          ("ful", ""), ("ness", ""))
_STEP4 = ("al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent",
          "ion", "ou", "ism", "ate", "iti", "ous", "ive", "ize")


def _step1ab(w: str) -> str:
    if w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("ies"):
        w = w[:-2]
    elif w.endswith("ss"):
        pass
    elif w.endswith("s"):
        w = w[:-1]
    if w.endswith("eed"):
        if _measure(w[:-3]) > 0:
            w = w[:-1]
        return w
    for suffix in ("ed", "ing"):
        if w.endswith(suffix) and _has_vowel(w[:-len(suffix)]):
            w = w[:-len(suffix)]
            if w.endswith(("at", "bl", "iz")):
                return w + "e"
            if _double_consonant(w) and w[-1] not in "lsz":
                return w[:-1]
            if _measure(w) == 1 and _cvc(w):
                return w + "e"
            return w
    return w


def _step1c(w: str) -> str:
    if w.endswith("y") and _has_vowel(w[:-1]):
        return w[:-1] + "i"
    return w


def _rules(w: str, rules) -> str:
    for suffix, replacement in rules:
        out = _replace(w, suffix, replacement, 0)
        if out is not None:
            return out
    return w


def _step4(w: str) -> str:
    for suffix in _STEP4:
        if w.endswith(suffix):
            stem = w[:-len(suffix)]
            if _measure(stem) > 1 and (suffix != "ion" or stem.endswith(("s", "t"))):
                return stem
            return w
    return w


def _step5(w: str) -> str:
    if w.endswith("e"):
        stem = w[:-1]
        m = _measure(stem)
        if m > 1 or (m == 1 and not _cvc(stem)):
            w = stem
    if _measure(w) > 1 and _double_consonant(w) and w.endswith("l"):
        w = w[:-1]
    return w


def _stem(word: str) -> str:
    if len(word) <= 2:
        return word
    w = _step1c(_step1ab(word))
    w = _rules(w, _STEP2)
    w = _rules(w, _STEP3)
    return _step5(_step4(w))


def porter_stem(word: str) -> str:
    """The Porter stem of a lowercase word.

    Examples
    --------
    >>> [porter_stem(w) for w in ["caresses", "ponies", "relational", "hopping", "generalization"]]
    ['caress', 'poni', 'relat', 'hop', 'gener']
    """
    stem = _CACHE.get(word)
    if stem is None:
        stem = _stem(word)
        if len(_CACHE) < _CACHE_LIMIT:
            _CACHE[word] = stem
    return stem
