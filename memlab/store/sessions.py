"""Session state: pins (with their TTL and workspace binding), anchors and anchor reviews (a
mixin of :class:`~memlab.store.MemoryStore`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memlab.errors import SessionPinWorkspaceConflict, UnknownItemError
from memlab.model import validate_id, validate_text, validate_weight
from memlab.store.journal import journaled
from memlab.store.workspace import NewItem

__all__ = ["SessionsMixin"]


@dataclass
class _PinSession:
    workspace_id: str
    pins: dict[str, float] = field(default_factory=dict)
    expires_ts: float = 0.0


class SessionsMixin:
    """Pins, anchors and reviews of :class:`~memlab.store.MemoryStore`."""

    def _live_pin_session(self, session_id: str, now_ts: float, *, write: bool = False
                          ) -> _PinSession | None:
        """The session's pin state unless expired (the TTL also releases the workspace binding).

        Only a (journaled) pin write drops an expired session; a read leaves the state alone,
        so reads never change what :meth:`serialize` shows or what a reopen restores.
        """
        state = self._pins.get(session_id)
        if state is not None and now_ts >= state.expires_ts:
            if write:
                del self._pins[session_id]
            return None
        return state

    @journaled
    def pin(self, workspace_id: str, session_id: Any, item_id: Any, weight: Any, now: datetime,
            ttl_h: float) -> None:
        with self.lock:
            validate_id(session_id, "session_id")
            self.workspace(workspace_id).require(item_id)
            weight = validate_weight(weight, "weight")
            now_ts = now.timestamp()
            expires_ts = now_ts + float(ttl_h) * 3600.0
            state = self._live_pin_session(session_id, now_ts)
            if state is not None and state.workspace_id != workspace_id:
                raise SessionPinWorkspaceConflict(
                    f"session_id {session_id!r} is bound to workspace {state.workspace_id!r}; "
                    f"cannot pin from workspace {workspace_id!r}")
            self._mutating()
            state = self._live_pin_session(session_id, now_ts, write=True)  # drops an expired one
            if state is None:
                state = self._pins[session_id] = _PinSession(workspace_id)
            state.pins[item_id] = weight
            state.expires_ts = expires_ts

    @journaled
    def unpin(self, workspace_id: str, session_id: Any, item_id: Any, now: datetime,
              ttl_h: float) -> None:
        with self.lock:
            validate_id(session_id, "session_id")
            validate_id(item_id, "item_id")
            now_ts = now.timestamp()
            expires_ts = now_ts + float(ttl_h) * 3600.0
            self._mutating()
            state = self._live_pin_session(session_id, now_ts, write=True)
            if state is None or state.workspace_id != workspace_id or item_id not in state.pins:
                return
            del state.pins[item_id]
            state.expires_ts = expires_ts

    def pins(self, workspace_id: str, session_id: Any, now: datetime) -> dict[str, float]:
        """The live pins of ``session_id`` as seen from ``workspace_id`` ({} across workspaces)."""
        with self.lock.shared():
            validate_id(session_id, "session_id")
            state = self._live_pin_session(session_id, now.timestamp())
            if state is None or state.workspace_id != workspace_id:
                return {}
            return dict(state.pins)

    # ------------------------------------------------------------ anchors
    @journaled
    def add_anchor(self, workspace_id: str, session_id: Any, new_item: NewItem,
                   now: datetime, initial_activation: float = 0.5) -> str:
        with self.lock:
            validate_id(session_id, "session_id")
            # add_items is all-or-nothing and the append after it cannot fail
            (item_id,) = self.add_items(workspace_id, [new_item], now, initial_activation)
            ws = self.workspace(workspace_id)
            self._anchors.setdefault((workspace_id, session_id), []).append(ws.index_of[item_id])
            return item_id

    def anchors(self, workspace_id: str, session_id: str) -> list[int]:
        with self.lock.shared():
            return list(self._anchors.get((workspace_id, session_id), ()))

    @journaled
    def flag_anchor(self, workspace_id: str, session_id: Any, anchor_id: Any, reason: Any) -> None:
        with self.lock:
            validate_id(session_id, "session_id")
            idx = self.workspace(workspace_id).require(anchor_id, "anchor_id")
            if idx not in self._anchors.get((workspace_id, session_id), ()):
                raise UnknownItemError(f"anchor_id {anchor_id!r} is not an anchor of session "
                                       f"{session_id!r}")
            validate_text(reason, "reason")
            self._mutating()
            self._anchor_reviews.setdefault((workspace_id, session_id), {})[anchor_id] = reason

    @journaled
    def clear_anchor_flag(self, workspace_id: str, session_id: str, anchor_id: str) -> None:
        with self.lock:
            self._mutating()
            self._anchor_reviews.get((workspace_id, session_id), {}).pop(anchor_id, None)

    def drift_warnings(self, workspace_id: str, session_id: str) -> list[dict[str, Any]]:
        """The session's anchors marked for review: ``[{anchor_id, anchor_type, reason}]``."""
        with self.lock.shared():
            ws = self.workspace(workspace_id)
            reviews = self._anchor_reviews.get((workspace_id, session_id), {})
            return [{"anchor_id": a,
                     "anchor_type": ws.metadata_of(ws.index_of[a]).get("anchor_type"),
                     "reason": reason} for a, reason in sorted(reviews.items())]
