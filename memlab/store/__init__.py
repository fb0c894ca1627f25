"""The one store (SPEC §1): every workspace's items, edges, sessions' pins and anchors.

Several :class:`~memlab.memory.Memory` facades may share one :class:`MemoryStore`; each sees only its
own workspace. Writes validate everything first and then apply, so a failed write changes nothing.
All access goes through one re-entrant readers-writer lock, :attr:`MemoryStore.lock`, which
makes a store safe to share between threads: writes hold it exclusively (``with store.lock:``),
reads that change nothing hold it shared (``with store.lock.shared():``) and run together.

The package is split by concern; :class:`MemoryStore` is composed of one mixin per concern:

- :mod:`~memlab.store.workspace`: :class:`Workspace` (the columns, indexes and edges of one
  workspace, and the read interface the layers above use) and :class:`NewItem`;
- :mod:`~memlab.store.items`: item writes (add, update, archive, salience, activation);
- :mod:`~memlab.store.edges`: edge validation, writes and reads;
- :mod:`~memlab.store.sessions`: pins, anchors and anchor reviews;
- :mod:`~memlab.store.journal`: the ``journaled`` decorator, replay, group commit,
  transactions and compaction;
- :mod:`~memlab.store.core`: :class:`MemoryStore` itself, its state and its workspaces.
"""

from memlab.store.core import MemoryStore
from memlab.store.items import paused_gc
# re-exported: everything `memlab.store` offered before it became a package
from memlab.store.journal import (_CLASSES, _GROUP_COMMITTED, COMPACT_AFTER,  # noqa: F401
                                  JOURNALED_OPS, REINFORCE_BATCH, _numbers_below, journaled)
from memlab.store.sessions import _PinSession  # noqa: F401
from memlab.store.workspace import NewItem, Workspace, index_text, node_key_of  # noqa: F401

__all__ = ["MemoryStore", "NewItem", "Workspace", "node_key_of", "paused_gc"]
