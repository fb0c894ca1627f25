"""Text utilities: the tokenizer, English stopwords, the token estimate and the entity detector."""

from __future__ import annotations

import re
import unicodedata

from memlab.stemming import porter_stem
from typing import Protocol, runtime_checkable

__all__ = ["STOPWORDS", "MAX_TERM_CHARS", "words", "word_spans", "normalise_title", "leading_segment", "tokenize",
           "estimate_tokens",
           "EntityDetector", "CapitalisedSpanDetector", "Gazetteer", "strip_parenthetical",
           "TITLE_KEYS"]

# NLTK's English stopword list (public domain), lowercase, apostrophes split the way ``tokenize``
# splits them.
STOPWORDS: frozenset[str] = frozenset("""
a about above after again against ain all am an and any are aren as at be because been before being
below between both but by can couldn d did didn do does doesn doing don down during each few for from
further had hadn has hasn have haven having he her here hers herself him himself his how i if in into
is isn it its itself just ll m ma me mightn more most mustn my myself needn no nor not now o of off on
once only or other our ours ourselves out over own re s same shan she should shouldn so some such t
than that the their theirs them themselves then there these they this those through to too under
until up ve very was wasn we were weren what when where which while who whom why will with won
wouldn y you your yours yourself yourselves
""".split())



def _mark_classes() -> tuple[str, str]:
    """Regex character classes of every combining mark (categories Mn, Mc, Me): those in the
    BMP and those above it (kept apart: a BMP-only class compiles to a fast bitmap).

    Unicode assigns marks only in planes 0-3 and 14, so only those are scanned (~50 ms, once).
    """
    found: tuple[list[str], list[str]] = ([], [])
    for plane in (0, 1, 2, 3, 14):
        for cp in range(plane << 16, (plane + 1) << 16):
            if unicodedata.category(chr(cp))[0] == "M":
                found[plane > 0].append(re.escape(chr(cp)))
    return "".join(found[0]), "".join(found[1])


# A word: a maximal run of letters, digits (``str.isalnum``: categories L* and N*) and combining
# marks (M*), so scripts that write vowels as marks (Devanagari "हिन्दी") stay one word and two
# words differing only in a mark stay apart.
_BMP_MARKS, _ASTRAL_MARKS = _mark_classes()
_WORD_RE = re.compile(f"(?:[^\\W_]|[{_BMP_MARKS}]|[\U00010000-\U0010FFFF](?<=[{_ASTRAL_MARKS}]))+")
_SPACE_RE = re.compile(r"\S+")


# Invisible format characters and variation selectors, removed before anything else (as
# Unicode's NFKC_Casefold does): "cafe\u00ad" is "cafe", an emoji's variation selector U+FE0F
# is no word, ZWNJ inside a Persian word does not split it.
_IGNORED = dict.fromkeys([0x00AD, 0x034F, 0x180B, 0x180C, 0x180D, 0x180F, 0x200C, 0x200D,
                          0x2060, 0xFEFF, *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)])


def _fold(text: str, fold_case: bool = True) -> str:
    """NFKC case folding: ``NFKC(casefold(NFKC(text)))`` (ASCII: just ``lower``); NFKC alone
    when not ``fold_case``. Invisible format characters and variation selectors are dropped."""
    if text.isascii():
        return text.lower() if fold_case else text
    text = text.translate(_IGNORED)
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    if not fold_case:
        return text
    text = text.casefold()
    return text if unicodedata.is_normalized("NFKC", text) else unicodedata.normalize("NFKC", text)


def words(text: str, *, fold_case: bool = True) -> list[str]:
    """The normalised words of ``text``: memlab's one text normaliser.

    ``text`` is NFKC-normalised and case-folded, then split into maximal runs of letters, digits
    and combining marks of any script (a mark keeps its own word where nothing precedes it:
    NFKC turns some letters, such as the Arabic ligature U+FC5E, into a space and marks). Titles, labels, the
    gazetteer, the maintenance shingles, the point-query match and BM25's tokens all go through
    it, so two strings name the same thing exactly when their words are equal. Pure ASCII text
    gives the lowercase runs of ``[a-z0-9]``.

    Parameters
    ----------
    text : str
        Any text.
    fold_case : bool
        Case-fold (the default). ``False`` keeps case, for matchers that are case-sensitive on
        purpose (:func:`memlab.datasets.graphs.title_mentions`); NFKC and the word rule stay.

    Returns
    -------
    list of str
        The words in order.

    Examples
    --------
    >>> words("Zürich, ZU\\u0308RICH and Ёлка-2")
    ['zürich', 'zürich', 'and', 'ёлка', '2']
    >>> words("ﬁle № ½ हिन्दी ♀\ufe0f")
    ['file', 'no', '1', '2', 'हिन्दी']
    >>> words("Öland's ﬁelds", fold_case=False)
    ['Öland', 's', 'fields']
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {type(text).__name__}")
    return _WORD_RE.findall(_fold(text, fold_case))


def word_spans(text: str) -> list[tuple[int, int, str]]:
    """:func:`words` of ``text`` with where each stands in ``text``: ``(start, end, word)``.

    The words are exactly ``words(text)``. A word's span is its run in ``text``; where
    normalisation reshapes a whitespace-separated chunk ("½", "ﬁle" are one; "a´b" splits) and
    its runs do not map one to one, every word of the chunk spans the whole chunk.

    Examples
    --------
    >>> word_spans("Trip to Zu\\u0308rich!")
    [(0, 4, 'trip'), (5, 7, 'to'), (8, 15, 'zürich')]
    """
    if text.isascii():
        return [(m.start(), m.end(), m.group().lower()) for m in _WORD_RE.finditer(text)]
    out: list[tuple[int, int, str]] = []
    for chunk in _SPACE_RE.finditer(text):
        chunk_words = words(chunk.group())
        if not chunk_words:
            continue
        start = chunk.start()
        runs = [(start + m.start(), start + m.end(), words(m.group()))
                for m in _WORD_RE.finditer(chunk.group())]
        if [w for _, _, ws in runs for w in ws] == chunk_words:
            out.extend((a, b, w) for a, b, ws in runs for w in ws)
        else:
            out.extend((chunk.start(), chunk.end(), w) for w in chunk_words)
    return out
# metadata keys that name an item (the gazetteer's titles, the dense sentences' prefix)
TITLE_KEYS = ("title", "label", "name")
_PARENTHETICAL_RE = re.compile(r"\s*\([^)]*\)\s*$")


def tokenize(text: str) -> list[str]:
    """The :func:`words` of ``text`` with English stopwords removed.

    Examples
    --------
    >>> tokenize("Why did we pick JWT over sessions?")
    ['pick', 'jwt', 'sessions']
    """
    return [w for w in words(text) if w not in STOPWORDS]


# The longest term the Porter analyzer keeps: a longer token (no English word; a hash, a base64
# blob, a run of one letter) is cut to its first MAX_TERM_CHARS characters before stemming, so
# one huge token costs bounded work and bounded vocabulary. Items and queries are cut alike, so
# a search for the token still finds it. The "plain" analyzer keeps tokens whole (the seed's
# behaviour, which SEED_COMPAT reproduces).
MAX_TERM_CHARS = 256


def analyze_porter(text: str) -> list[str]:
    """:func:`tokenize`, then the Porter stem of each token (memlab's default BM25 analyzer).

    Tokens longer than :data:`MAX_TERM_CHARS` are cut to that length before stemming.

    Examples
    --------
    >>> analyze_porter("She went to the painting classes")
    ['went', 'paint', 'class']
    >>> [len(t) for t in analyze_porter("y" * 10_000)]
    [256]
    """
    return [porter_stem(w if len(w) <= MAX_TERM_CHARS else w[:MAX_TERM_CHARS])
            for w in tokenize(text)]


def analyze_trigrams(text: str) -> list[str]:
    """Character trigrams of every :func:`tokenize` word, padded with ``^`` and ``$``.

    A second BM25 field for spelling variants (issue 17): "favourite" and "favorite" share 7 of
    their 9 trigrams and "impostors" and "imposter" 5, where their Porter stems differ. Words
    are cut to :data:`MAX_TERM_CHARS` first, as :func:`analyze_porter` cuts them.
    Hand-written rather than taken from a library: it is three lines, and every index built
    with it (items and queries alike) must keep exactly this definition.

    Examples
    --------
    >>> analyze_trigrams("the favourite")
    ['^fa', 'fav', 'avo', 'vou', 'our', 'uri', 'rit', 'ite', 'te$']
    >>> analyze_trigrams("I go")
    ['^go', 'go$']
    """
    out: list[str] = []
    for word in tokenize(text):
        padded = f"^{word[:MAX_TERM_CHARS]}$"
        out.extend(padded[i:i + 3] for i in range(len(padded) - 2))
    return out


# how item text and queries become BM25 terms; chosen per store (index and queries must agree).
# "trigram" is meant as a second field beside a word analyzer (SurfacingConfig.spelling_weight)
ANALYZERS = {"porter": analyze_porter, "plain": tokenize, "trigram": analyze_trigrams}


def normalise_title(text: str) -> str:
    """A title reduced for equality tests: its :func:`words` joined by single spaces.

    NFKC, case folding, punctuation dropped, letters, digits and combining marks of any script
    kept: two titles or labels name the same thing exactly when these are equal. Empty when
    ``text`` has no letter or digit.

    Examples
    --------
    >>> normalise_title("  The Auth-Service (v2)! ")
    'the auth service v2'
    >>> normalise_title("ZÜRICH"), normalise_title("Ёлка 2"), normalise_title("Змей 2")
    ('zürich', 'ёлка 2', 'змей 2')
    """
    return " ".join(words(text))


_LEADING_RE = re.compile(r"[^\n\r:]*")


def leading_segment(text: str) -> str:
    """The first segment of ``text``: its first line, up to the first colon.

    What a point query's exact match compares with when an item has no title (SPEC §4.2
    "leading text"): ``"Catalog: every product"`` leads with ``"Catalog"``, a MuSiQue passage
    ``"Title\\nParagraph"`` with its title.

    Examples
    --------
    >>> leading_segment("Catalog: every product we sell"), leading_segment("Edge cache\\nnotes")
    ('Catalog', 'Edge cache')
    """
    return _LEADING_RE.match(text).group()


def estimate_tokens(text: str) -> int:
    """The SPEC §3 token estimate: 0 for empty text, else ``max(1, len(text) // 4)``.

    Examples
    --------
    >>> estimate_tokens(""), estimate_tokens("abc"), estimate_tokens("abcdefghi")
    (0, 1, 2)
    """
    return 0 if not text else max(1, len(text) // 4)


def strip_parenthetical(title: str) -> str:
    """``"Paris (Texas)"`` → ``"Paris"``: the disambiguation suffix is not how text names it.

    Examples
    --------
    >>> strip_parenthetical("Mercury (planet)"), strip_parenthetical("Mercury")
    ('Mercury', 'Mercury')
    """
    return _PARENTHETICAL_RE.sub("", title).strip()


class Gazetteer:
    """Known item titles/labels of a workspace, matched as whole sequences of :func:`words`.

    Matching generates the query's word n-grams (up to the longest known title, at most
    ``max_words``) and looks each up in a dict, so its cost does not grow with the number of
    titles. A title with a parenthetical suffix ("David Jones (rugby)") is also known without it.
    Each title remembers the items it names (``add(title, item)``), so a query can be mapped to
    the items it names by title (:meth:`items_named`).

    Examples
    --------
    >>> g = Gazetteer(); g.add("Auth Service", 0); g.add("JWT", 1); g.add("JWT (token)", 2)
    >>> sorted(g.find("does the auth service issue a jwt"))
    [(9, 21, 'auth service'), (30, 33, 'jwt')]
    >>> g.items_named("does the auth service issue a jwt")
    [0, 1, 2]
    """

    def __init__(self, max_words: int = 8) -> None:
        self._items: dict[str, set[int]] = {}  # phrase -> the items it names (-1: no item)
        self._longest = 0
        self._max_words = max_words

    def __len__(self) -> int:
        return len(self._items)

    def phrases(self, title: str) -> list[str]:
        """The phrases :meth:`add` would know ``title`` by (computed, nothing changed)."""
        out = []
        for variant in (title, strip_parenthetical(title)):
            found = words(variant)
            if found and len(found) <= self._max_words and " ".join(found) not in out:
                out.append(" ".join(found))
        return out

    def add(self, title: str, item: int = -1) -> None:
        """Know ``title`` (and its parenthesis-free form) as naming ``item``."""
        self.add_phrases(self.phrases(title), item)

    def add_phrases(self, phrases: list[str], item: int = -1) -> None:
        """Know each of ``phrases`` (from :meth:`phrases`) as naming ``item``."""
        for phrase in phrases:
            self._items.setdefault(phrase, set()).add(item)
            self._longest = max(self._longest, phrase.count(" ") + 1)

    def remove(self, title: str, item: int = -1) -> None:
        """Forget that ``title`` names ``item`` (a title naming nothing else is forgotten)."""
        self.remove_phrases(self.phrases(title), item)

    def remove_phrases(self, phrases: list[str], item: int = -1) -> None:
        """Forget that each of ``phrases`` (from :meth:`phrases`) names ``item``."""
        for phrase in phrases:
            named = self._items.get(phrase)
            if named is not None:
                named.discard(item)
                if not named:
                    del self._items[phrase]

    def find(self, text: str) -> list[tuple[int, int, str]]:
        """Non-overlapping ``(start, end, title)`` matches in ``text``, longest match first."""
        if not self._items:
            return []
        spans = word_spans(text)
        found, i = [], 0
        while i < len(spans):
            for n in range(min(self._longest, len(spans) - i), 0, -1):
                phrase = " ".join(s[2] for s in spans[i:i + n])
                if phrase in self._items:
                    found.append((spans[i][0], spans[i + n - 1][1], phrase))
                    i += n
                    break
            else:
                i += 1
        return found

    def items_of(self, phrase: str) -> list[int]:
        """The items ``phrase`` (one of :meth:`phrases`' forms) names, ascending.

        >>> g = Gazetteer(); g.add("JWT (token)", 2); g.add("JWT", 1); g.items_of("jwt")
        [1, 2]
        """
        return sorted(i for i in self._items.get(phrase, ()) if i >= 0)

    def items_named(self, text: str) -> list[int]:
        """The items whose title ``text`` names (per :meth:`find`), ascending."""
        return sorted({i for _, _, phrase in self.find(text) for i in self._items[phrase]
                       if i >= 0})


@runtime_checkable
class EntityDetector(Protocol):
    """Pluggable entity detection for the router: ``detect(query, gazetteer) -> list[str]``."""

    def detect(self, query: str, gazetteer: Gazetteer | None = None) -> list[str]: ...


# Words that are capitalised only because they open a sentence, never entities on their own.
_COMMON_OPENERS = STOPWORDS | frozenset(
    "what who where when why which whose how list show get find all tell give explain describe "
    "please can could would should did does do is are was were summarize summarise remind recall "
    "compare yes no ok okay hi hello thanks".split()
)
_QUOTED_RE = re.compile(r"\"([^\"]+)\"|“([^”]+)”|'([^']{2,})'(?!\w)")
_CAP_WORD_RE = re.compile(r"\b[A-Z][\w\-]*(?:'s)?")
_SENTENCE_START_RE = re.compile(r"(?:^|[.!?]\s+)\W*$")


class CapitalisedSpanDetector:
    """The default deterministic entity detector.

    An entity is (1) a quoted span (``"…"``, ``“…”``, ``'…'``), (2) a run of consecutive capitalised
    words (``Project Apollo``, ``JWT``), where a sentence-opening word counts only if it is not a
    common opener (stopword, question word, imperative such as ``Show``) and the pronoun ``I``
    never counts, or (3) a known item title/label from the workspace's :class:`Gazetteer`.
    Overlapping matches count once; the result is in order of appearance.

    Examples
    --------
    >>> CapitalisedSpanDetector().detect('Why did Alice move the "Q3 plan" to Project Apollo?')
    ['Alice', 'Q3 plan', 'Project Apollo']
    >>> CapitalisedSpanDetector().detect("Show me all tickets")
    []
    """

    def detect(self, query: str, gazetteer: Gazetteer | None = None) -> list[str]:
        spans: list[tuple[int, int, str]] = []
        for m in _QUOTED_RE.finditer(query):
            text = next(g for g in m.groups() if g is not None).strip()
            if text:
                spans.append((m.start(), m.end(), text))
        run: list[re.Match] = []
        for m in _CAP_WORD_RE.finditer(query):
            word = m.group()
            opener = _SENTENCE_START_RE.search(query[:m.start()]) is not None
            if word == "I" or (opener and word.lower().removesuffix("'s") in _COMMON_OPENERS):
                self._close_run(run, query, spans)
                continue
            if run and query[run[-1].end():m.start()].strip() == "":
                run.append(m)
            else:
                self._close_run(run, query, spans)
                run.append(m)
        self._close_run(run, query, spans)
        if gazetteer is not None:
            spans.extend(gazetteer.find(query))
        spans.sort(key=lambda s: (s[0], -(s[1] - s[0])))
        entities, last_end = [], -1
        for start, end, text in spans:
            if start >= last_end:
                entities.append(text)
                last_end = end
        return entities

    @staticmethod
    def _close_run(run: list, query: str, spans: list) -> None:
        if run:
            spans.append((run[0].start(), run[-1].end(), query[run[0].start():run[-1].end()]))
            run.clear()
