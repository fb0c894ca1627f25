"""Bounds on the work one request may ask of the service (SPEC §9; issue 14, item 6).

:class:`Limits` holds the service's configurable limits; :class:`LimitExceeded` (a
``ValueError``) names the limit and the value that broke it, and the HTTP app answers it with
413 (the MCP server with a tool error carrying the same message). ``Limits.from_env()`` reads
``MEMLAB_MAX_<NAME>`` environment variables, e.g. ``MEMLAB_MAX_BODY_BYTES=2000000``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from typing import Any, Mapping

__all__ = ["Limits", "LimitExceeded", "check_id_text", "QUERY_FIELDS", "CONTENT_FIELDS",
           "JSON_FIELDS"]

# How every text argument of every HTTP route and MCP tool is bounded, by its name (one table
# for both surfaces, so they cannot drift; :meth:`Limits.check_args`). A string argument not
# named here is an identifier or a short name (ids, keys, cache names, edge and node types,
# strategies, placements, dates) and is bounded by ``max_id_chars``.
QUERY_FIELDS = frozenset({"query", "q"})  # max_query_chars
CONTENT_FIELDS = frozenset({"content", "value", "label", "title", "why_changed", "provenance",
                            "ref"})  # max_content_chars
JSON_FIELDS = frozenset({"metadata", "fields", "value"})  # max_metadata_bytes / _depth


class LimitExceeded(ValueError):
    """A request is larger than a configured limit (HTTP 413).

    Parameters
    ----------
    limit : str
        The name of the limit (a :class:`Limits` field).
    allowed : int
        The configured value of the limit.
    got : int
        The size the request had.
    what : str
        What was measured, e.g. ``"items[3].content"``.
    unit : str
        The unit of ``got`` and ``allowed`` (``"bytes"``, ``"characters"``, ...).
    """

    def __init__(self, limit: str, allowed: int, got: int, what: str, unit: str) -> None:
        self.limit, self.allowed, self.got, self.what, self.unit = limit, allowed, got, what, unit
        super().__init__(f"{what} is {got} {unit}; the limit {limit} is {allowed} {unit}")


@dataclass(frozen=True)
class Limits:
    """Configurable limits of the service; every one must be a positive int.

    Parameters
    ----------
    max_body_bytes : int
        Largest request body (checked before it is parsed; 413 otherwise).
    max_content_chars : int
        Longest ``content`` (and other free text: see :data:`CONTENT_FIELDS`) of one request or
        of one bulk item.
    max_query_chars : int
        Longest query (``query``, ``q``): the cost of a search grows with the query's terms, so
        a query is bounded far below a content.
    max_id_chars : int
        Longest identifier or short name (every other string argument: ``item_id``,
        ``session_id``, ``workspace_id``, ``key``, ``cache``, ``edge_type``, ``node_type``, ...).
    max_bulk_items : int
        Most items in one ``/v1/items/bulk`` request.
    bulk_chunk_items : int
        A bulk request is written in transactions of at most this many items; the store's lock
        is released between them, so other requests interleave (chunk-atomic, see
        :meth:`memlab.Memory.add_many`).
    max_metadata_bytes : int
        Largest ``metadata`` (or ``fields``/``value`` of an ingest), as compact JSON.
    max_metadata_depth : int
        Deepest nesting of ``metadata`` (a flat mapping has depth 1).

    Examples
    --------
    >>> Limits(max_body_bytes=10).check_body(11)
    Traceback (most recent call last):
    ...
    memlab.service.limits.LimitExceeded: the request body is 11 bytes; the limit max_body_bytes is 10 bytes
    """

    max_body_bytes: int = 8 * 1024 * 1024
    max_content_chars: int = 100_000
    max_query_chars: int = 10_000
    max_id_chars: int = 256
    max_bulk_items: int = 10_000
    bulk_chunk_items: int = 1_000
    max_metadata_bytes: int = 64 * 1024
    max_metadata_depth: int = 16

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{f.name} must be a positive int, got {value!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Limits":
        """Defaults overridden by ``MEMLAB_<FIELD>`` variables (e.g. ``MEMLAB_MAX_BODY_BYTES``)."""
        environ = os.environ if environ is None else environ
        values: dict[str, int] = {}
        for f in fields(cls):
            name = f"MEMLAB_{f.name.upper()}"
            if name in environ:
                try:
                    values[f.name] = int(environ[name])
                except ValueError:
                    raise ValueError(f"{name} must be a positive int, got "
                                     f"{environ[name]!r}") from None
        return cls(**values)

    # ---------------------------------------------------------------- checks
    def check_body(self, size: int) -> None:
        """Raise :class:`LimitExceeded` when a body of ``size`` bytes is too large."""
        if size > self.max_body_bytes:
            raise LimitExceeded("max_body_bytes", self.max_body_bytes, size, "the request body",
                                "bytes")

    def check_text(self, value: Any, what: str) -> None:
        """Raise when ``value`` is a string longer than ``max_content_chars``."""
        if isinstance(value, str) and len(value) > self.max_content_chars:
            raise LimitExceeded("max_content_chars", self.max_content_chars, len(value), what,
                                "characters")

    def check_json(self, value: Any, what: str) -> None:
        """Raise when ``value`` (metadata, fields) is nested or sized beyond the limits."""
        if value is None:
            return
        depth = _depth(value, self.max_metadata_depth + 1)
        if depth > self.max_metadata_depth:
            raise LimitExceeded("max_metadata_depth", self.max_metadata_depth, depth, what,
                                "levels")
        try:
            size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False)
                       .encode("utf-8", "surrogatepass"))
        except (TypeError, ValueError):
            return  # not JSON: the store's own validation names the problem
        if size > self.max_metadata_bytes:
            raise LimitExceeded("max_metadata_bytes", self.max_metadata_bytes, size, what,
                                "bytes")

    def check_query(self, value: Any, what: str) -> None:
        """Raise when ``value`` is a string longer than ``max_query_chars``."""
        if isinstance(value, str) and len(value) > self.max_query_chars:
            raise LimitExceeded("max_query_chars", self.max_query_chars, len(value), what,
                                "characters")

    def check_id(self, value: Any, what: str) -> None:
        """Raise when ``value`` is a string longer than ``max_id_chars``."""
        if isinstance(value, str) and len(value) > self.max_id_chars:
            raise LimitExceeded("max_id_chars", self.max_id_chars, len(value), what,
                                "characters")

    def check_args(self, args: Mapping[str, Any], where: str = "") -> None:
        """Check every argument of one request or tool call against its limit, by its name.

        Names in :data:`QUERY_FIELDS` get ``max_query_chars``, in :data:`CONTENT_FIELDS`
        ``max_content_chars``, in :data:`JSON_FIELDS` the metadata limits; ``items`` is a bulk
        request (:meth:`check_bulk`); any other string (or list of strings) is an identifier or
        short name and gets ``max_id_chars``. Values of other types are left to the route's own
        validation.

        Parameters
        ----------
        args : mapping
            Argument name -> value (a JSON body, query parameters, a tool call's arguments).
        where : str
            Prefix of the names in the error (e.g. ``"items[3]."``).

        Raises
        ------
        LimitExceeded
            The first argument over its limit, named with its value's size.

        Examples
        --------
        >>> Limits(max_id_chars=4).check_args({"edge_type": "RELATED"})
        Traceback (most recent call last):
        ...
        memlab.service.limits.LimitExceeded: edge_type is 7 characters; the limit max_id_chars is 4 characters
        """
        if not isinstance(args, Mapping):
            return
        for name, value in args.items():
            what = f"{where}{name}"
            if name == "items" and isinstance(value, list) and not where:
                self.check_bulk(value)
                continue
            if name in JSON_FIELDS and not isinstance(value, str):
                self.check_json(value, what)  # a string value is free text (below)
            if name in QUERY_FIELDS:
                self.check_query(value, what)
            elif name in CONTENT_FIELDS:
                self.check_text(value, what)
            elif isinstance(value, str):
                self.check_id(value, what)
            elif isinstance(value, list) and name not in JSON_FIELDS:
                for pos, entry in enumerate(value):
                    self.check_id(entry, f"{what}[{pos}]")

    def check_item(self, item: Any, where: str = "") -> None:
        """Check one item (a string, or a mapping: ``content``, ``metadata``, ids)."""
        if isinstance(item, str):
            self.check_text(item, f"{where}content")
        elif isinstance(item, Mapping):
            self.check_text(item.get("content"), f"{where}content")
            self.check_json(item.get("metadata"), f"{where}metadata")
            for name, value in item.items():
                if name not in ("content", "metadata"):
                    self.check_id(value, f"{where}{name}")

    def check_bulk(self, items: list) -> None:
        """Check a bulk request: its item count, then every item."""
        if len(items) > self.max_bulk_items:
            raise LimitExceeded("max_bulk_items", self.max_bulk_items, len(items),
                                "the bulk request", "items")
        for pos, item in enumerate(items):
            self.check_item(item, f"items[{pos}].")


def _depth(value: Any, cap: int) -> int:
    """Nesting depth of JSON ``value`` (scalars 0, a flat container 1), counted up to ``cap``.

    Iterative, so a hostile 100,000-level nesting costs no recursion.
    """
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, Mapping):
            children = node.values()
        elif isinstance(node, (list, tuple)):
            children = node
        else:
            continue
        deepest = max(deepest, level)
        if deepest >= cap:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def check_id_text(value: Any, name: str) -> None:
    """Reject an identifier holding a NUL character (ValueError naming ``name``).

    Examples
    --------
    >>> check_id_text("a\\x00b", "item_id")
    Traceback (most recent call last):
    ...
    ValueError: item_id must not contain NUL characters, got 'a\\x00b'
    """
    if isinstance(value, str) and "\x00" in value:
        raise ValueError(f"{name} must not contain NUL characters, got {value!r:.80}")


def check_id_args(args: dict[str, Any]) -> None:
    """:func:`check_id_text` on every argument that names an id (HTTP bodies and MCP tool
    arguments alike, so the two surfaces cannot drift).

    Examples
    --------
    >>> check_id_args({"content": "a\\x00b", "item_id": "x"})  # content may hold NUL
    >>> check_id_args({"src": "a\\x00b"})
    Traceback (most recent call last):
    ...
    ValueError: src must not contain NUL characters, got 'a\\x00b'
    """
    for name, value in args.items():
        if name.endswith("_id") or name in ("src", "dst", "cache", "key"):  # key: a cache key
            check_id_text(value, name)
