"""Scoped API keys for the service (SPEC §9): which workspaces a key may read and write.

A :class:`KeyRing` holds the keys a server accepts. Each :class:`ApiKey` names the workspaces it
may ``read`` and ``write`` as glob patterns (``fnmatch`` syntax, case-sensitive: ``team-a-*``,
``shared``, ``*``); a key that may write a workspace may also read it, because write responses
echo the workspace's state (a pin answers with the session's pins). An ``admin`` key may read and
write every workspace and see the store-wide health report (``/health/graph``, with the database
path).

The keys file is JSON or TOML (by suffix: ``.toml`` is TOML, anything else JSON), one table per
key::

    # keys.toml
    [[keys]]
    name = "team-a"                   # unique label (never sent by clients)
    key = "a-long-random-secret"      # or: sha256 = "<64 hex digits of sha256(secret)>"
    read = ["team-a-*", "shared"]
    write = ["team-a-*"]

    [[keys]]
    name = "ops"
    sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    admin = true

The JSON form is the same structure: ``{"keys": [{"name": ..., "key": ..., "read": [...]}]}``.
Unknown fields, a missing secret, duplicate names or secrets and empty patterns are errors
(``ValueError`` naming the entry and field), so a typo never silently widens or narrows a scope.

The environment: ``$MEMLAB_KEYS_FILE`` names a keys file; ``$MEMLAB_KEYS`` may hold the JSON
text itself; ``$MEMLAB_API_KEY`` (the single key of earlier versions) is an admin key for every
workspace. With no key at all the server is open: every caller is treated as admin.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ApiKey", "KeyRing", "OPEN", "ScopeError"]

_FIELDS = {"name", "key", "sha256", "read", "write", "admin"}
_HEX64 = re.compile(r"[0-9a-f]{64}")


class ScopeError(PermissionError):
    """A key (or an MCP server's allow-list) does not cover the workspace it names (HTTP 403)."""


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def _matches(patterns: tuple[str, ...], workspace_id: str) -> bool:
    return any(fnmatch.fnmatchcase(workspace_id, p) for p in patterns)


def _patterns(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(f"{where} must be a list of workspace patterns, got {value!r:.80}")
    for pos, pattern in enumerate(value):
        if not isinstance(pattern, str) or not pattern.strip():
            raise ValueError(f"{where}[{pos}] must be a non-empty string, got {pattern!r:.80}")
    return tuple(value)


@dataclass(frozen=True)
class ApiKey:
    """One key: its label, the sha256 of its secret and the workspaces it covers.

    Parameters
    ----------
    name : str
        A label for operators (never sent by clients, never in a response).
    digest : bytes
        sha256 of the secret (the secret itself is not kept).
    read, write : tuple of str
        Glob patterns of the workspaces the key may read, and write (write implies read).
    admin : bool
        Every workspace, read and write, and the store-wide health report.
    """

    name: str
    digest: bytes
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    admin: bool = False

    def can_read(self, workspace_id: str) -> bool:
        """Whether this key may read ``workspace_id``."""
        return self.admin or _matches(self.read, workspace_id) or \
            _matches(self.write, workspace_id)

    def can_write(self, workspace_id: str) -> bool:
        """Whether this key may write ``workspace_id``."""
        return self.admin or _matches(self.write, workspace_id)

    def check(self, workspace_id: str, access: str) -> str:
        """``workspace_id`` if this key may ``access`` (``"read"``/``"write"``) it.

        Raises
        ------
        ScopeError
            Outside the key's scope. The message names the workspace as the caller gave it and
            says nothing about whether it exists.
        """
        allowed = self.can_write(workspace_id) if access == "write" \
            else self.can_read(workspace_id)
        if not allowed:
            raise ScopeError(f"this API key may not {access} workspace {workspace_id!r}")
        return workspace_id


#: The principal of an open server (no keys configured): every workspace, admin.
OPEN = ApiKey(name="open", digest=b"", admin=True)


class KeyRing:
    """The keys a server accepts; empty means an open server (every caller is admin).

    Parameters
    ----------
    keys : sequence of ApiKey
        Distinct names and distinct secrets.

    Examples
    --------
    >>> ring = KeyRing.from_mapping({"keys": [
    ...     {"name": "a", "key": "secret-a", "read": ["shared"], "write": ["team-a-*"]}]})
    >>> key = ring.authenticate("secret-a")
    >>> key.can_write("team-a-1"), key.can_read("shared"), key.can_read("team-b-1")
    (True, True, False)
    >>> ring.authenticate("wrong") is None
    True
    """

    def __init__(self, keys: list[ApiKey] | tuple[ApiKey, ...] = ()) -> None:
        keys = tuple(keys)
        for key in keys:
            if not isinstance(key, ApiKey):
                raise ValueError(f"keys must be ApiKey objects, got {key!r:.80}")
        names = [k.name for k in keys]
        if len(set(names)) != len(names):
            raise ValueError(f"keys: duplicate name among {sorted(names)}")
        if len({k.digest for k in keys}) != len(keys):
            raise ValueError("keys: two entries have the same secret")
        self.keys = keys

    @property
    def open(self) -> bool:
        """No keys: the server does not authenticate."""
        return not self.keys

    def __len__(self) -> int:
        return len(self.keys)

    def authenticate(self, secret: str | None) -> ApiKey | None:
        """The key whose secret is ``secret`` (compared in constant time), else None."""
        if secret is None:
            return None
        given = _digest(secret)
        found = None
        for key in self.keys:  # no early exit: the time does not depend on which key matched
            if hmac.compare_digest(given, key.digest):
                found = key
        return found

    def with_admin_secret(self, secret: str | None) -> KeyRing:
        """This ring plus ``secret`` as an admin key named ``"api-key"`` (None: unchanged)."""
        if secret is None:
            return self
        if not isinstance(secret, str) or not secret:
            raise ValueError(f"api_key must be a non-empty string, got {secret!r:.80}")
        return KeyRing((*self.keys, ApiKey(name="api-key", digest=_digest(secret), admin=True)))

    @classmethod
    def from_mapping(cls, data: Any) -> KeyRing:
        """A ring from the parsed keys file (``{"keys": [ {...}, ... ]}``)."""
        if not isinstance(data, Mapping) or set(data) != {"keys"}:
            got = sorted(data) if isinstance(data, Mapping) else data
            raise ValueError("a keys file must hold exactly one field, 'keys', a list of "
                             f"key tables; got {got!r:.80}")
        if not isinstance(data["keys"], list):
            raise ValueError(f"a keys file's 'keys' must be a list of key tables, got "
                             f"{data['keys']!r:.80}")
        if not data["keys"]:
            # an empty ring would serve every route without a key: refused, not a silent open
            raise ValueError("a keys file's 'keys' is empty: give at least one key (to serve "
                             "without keys, pass no keys file)")
        keys = []
        for pos, entry in enumerate(data["keys"]):
            where = f"keys[{pos}]"
            if not isinstance(entry, Mapping):
                raise ValueError(f"{where} must be a table, got {entry!r:.80}")
            unknown = set(entry) - _FIELDS
            if unknown:
                raise ValueError(f"{where} has unknown fields {sorted(unknown)}; "
                                 f"allowed: {sorted(_FIELDS)}")
            name = entry.get("name")
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"{where}.name must be a non-empty string, got {name!r:.80}")
            where = f"keys[{pos}] ({name!r})"
            if ("key" in entry) == ("sha256" in entry):
                raise ValueError(f"{where} needs exactly one of 'key' and 'sha256'")
            if "key" in entry:
                secret = entry["key"]
                if not isinstance(secret, str) or len(secret) < 8:
                    raise ValueError(f"{where}.key must be a string of at least 8 characters")
                digest = _digest(secret)
            else:
                hexed = entry["sha256"]
                if not isinstance(hexed, str) or not _HEX64.fullmatch(hexed.lower()):
                    raise ValueError(f"{where}.sha256 must be 64 hex digits, got {hexed!r:.80}")
                digest = bytes.fromhex(hexed)
            admin = entry.get("admin", False)
            if not isinstance(admin, bool):
                raise ValueError(f"{where}.admin must be true or false, got {admin!r:.80}")
            read = _patterns(entry.get("read", []), f"{where}.read")
            write = _patterns(entry.get("write", []), f"{where}.write")
            if not (admin or read or write):
                raise ValueError(f"{where} grants nothing: give read, write or admin")
            keys.append(ApiKey(name=name, digest=digest, read=read, write=write, admin=admin))
        return cls(keys)

    @classmethod
    def from_file(cls, path: str | Path) -> KeyRing:
        """A ring from a keys file: TOML when the name ends in ``.toml``, else JSON."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"keys file {str(path)!r} cannot be read: {exc.strerror}") from None
        try:
            if path.suffix.lower() == ".toml":
                import tomllib
                data = tomllib.loads(text)
            else:
                data = json.loads(text)
        except ValueError as exc:  # tomllib.TOMLDecodeError and JSONDecodeError
            raise ValueError(f"keys file {str(path)!r} is not valid "
                             f"{'TOML' if path.suffix.lower() == '.toml' else 'JSON'}: "
                             f"{exc}") from None
        try:
            return cls.from_mapping(data)
        except ValueError as exc:
            raise ValueError(f"keys file {str(path)!r}: {exc}") from None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> KeyRing:
        """``$MEMLAB_KEYS_FILE`` or ``$MEMLAB_KEYS`` (JSON), plus ``$MEMLAB_API_KEY`` as admin."""
        env = os.environ if environ is None else environ
        path, inline = env.get("MEMLAB_KEYS_FILE"), env.get("MEMLAB_KEYS")
        if path and inline:
            raise ValueError("set MEMLAB_KEYS_FILE or MEMLAB_KEYS, not both")
        if path:
            ring = cls.from_file(path)
        elif inline:
            try:
                data = json.loads(inline)
            except ValueError as exc:
                raise ValueError(f"MEMLAB_KEYS is not valid JSON: {exc}") from None
            ring = cls.from_mapping(data)
        else:
            ring = cls()
        return ring.with_admin_secret(env.get("MEMLAB_API_KEY") or None)


def check_allowed(patterns: tuple[str, ...] | None, workspace_id: str) -> str:
    """``workspace_id`` if it matches one of ``patterns`` (None: any), else :class:`ScopeError`."""
    if patterns is not None and not _matches(patterns, workspace_id):
        raise ScopeError(f"workspace {workspace_id!r} is outside this server's allowed "
                         f"workspaces")
    return workspace_id


def parse_patterns(value: Any, name: str) -> tuple[str, ...] | None:
    """Workspace patterns from a list or a comma-separated string (None stays None)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [p.strip() for p in value.split(",")]
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{name} must be a non-empty list of workspace patterns, "
                         f"got {value!r:.80}")
    return _patterns(list(value), name)
