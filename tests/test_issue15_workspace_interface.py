"""Issue 15 item 2: the store split by concern, and a workspace read only through its interface.

``memlab.store`` is a package (workspace, items, edges, sessions, journal, core) whose
``MemoryStore`` is composed of one mixin per concern; every name the module exported still
imports from ``memlab.store``. Above the store, no module reads a :class:`Workspace` field: an
AST scan of every module outside the store finds each attribute read on a workspace and fails
on any that is not part of the public read interface (its public methods and properties). The
scan is shown to catch planted violations, so the test can fail.
"""

from __future__ import annotations

import ast
from datetime import datetime, timezone
from pathlib import Path

import pytest

import memlab
from memlab import ManualClock, Memory
from memlab.store import MemoryStore, Workspace

ROOT = Path(memlab.__file__).parent
T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)

# The public read interface: what the class defines without a leading underscore (methods and
# properties), and len(). Fields are what __init__ sets on the instance.
INTERFACE = frozenset({name for name in dir(Workspace) if not name.startswith("_")} | {"__len__"})
FIELDS = frozenset(vars(Workspace("w")))

# Modules that may read the fields: the store itself, and the store's serialisation (the store
# hands snapshot.capture/restore its own objects; it writes and reads every field by design).
OWNERS = ("store/", "snapshot.py")

_WS_NAMES = {"ws", "workspace", "_ws"}  # the names this code base gives a workspace
_WS_ATTRS = {"ws", "_ws"}  # run.ws, memory._ws, self.ws
_WS_CALLS = {"workspace", "ensure_workspace", "create_workspace"}  # store.workspace(wid)


def workspace_field_reads(source: str, path: str = "<string>") -> list[str]:
    """Every ``<workspace>.<name>`` in ``source`` where ``name`` is not in :data:`INTERFACE`.

    A workspace is an expression named like one (``ws``, ``workspace``, ``_ws``), an attribute
    ``.ws``/``._ws``, a call ``.workspace(...)`` (or ``ensure_``/``create_workspace``), a
    parameter annotated ``Workspace``, or a name assigned any of these. Returns
    ``"path:line: expression"`` strings in source order.
    """
    tree = ast.parse(source)
    names = set(_WS_NAMES)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            for arg in args.posonlyargs + args.args + args.kwonlyargs:
                if arg.annotation is not None and "Workspace" in ast.unparse(arg.annotation):
                    names.add(arg.arg)

    def is_workspace(expr: ast.expr) -> bool:
        if isinstance(expr, ast.Name):
            return expr.id in names
        if isinstance(expr, ast.Attribute):
            return expr.attr in _WS_ATTRS
        return (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
                and expr.func.attr in _WS_CALLS)

    grown = True
    while grown:  # names assigned a workspace, also through other such names
        grown = False
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None \
                    and is_workspace(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id not in names:
                        names.add(target.id)
                        grown = True
    found = [node for node in ast.walk(tree) if isinstance(node, ast.Attribute)
             and is_workspace(node.value) and node.attr not in INTERFACE]
    found.sort(key=lambda node: (node.lineno, node.col_offset))
    return [f"{path}:{node.lineno}: {ast.unparse(node)}" for node in found]


def _modules_above_the_store() -> list[Path]:
    return [p for p in sorted(ROOT.rglob("*.py"))
            if not p.relative_to(ROOT).as_posix().startswith(OWNERS)]


# ---------------------------------------------------------------------------- the rule
def test_no_module_above_the_store_reads_a_workspace_field():
    modules = _modules_above_the_store()
    assert len(modules) > 50  # the whole package is scanned, not an empty glob
    reads = [read for path in modules
             for read in workspace_field_reads(path.read_text(), path.relative_to(ROOT).as_posix())]
    assert reads == []


def test_the_scan_catches_planted_field_reads():
    planted = '''
def plan(store, mem, run, space: "Workspace", other: Workspace | None):
    ws = store.workspace(mem.workspace_id)
    alias = ws
    ok = (len(ws), ws.item(0), ws.eligible_mask(), ws.workspace_id, run.ws.bm25_for(None))
    a = ws.items[0]
    b = alias.index_of["x"]
    c = run.ws.eligible.view()
    d = mem._ws.bm25
    e = store.workspace("w").tokens
    f = space.graph.table, other.topic_fields
    g = ws._next_generated
    run.ws.version = 3
    not_a_workspace = run.items, mem.index_of, store.graph
    return ok, a, b, c, d, e, f, g
'''
    assert workspace_field_reads(planted, "planted.py") == [
        "planted.py:6: ws.items",
        "planted.py:7: alias.index_of",
        "planted.py:8: run.ws.eligible",
        "planted.py:9: mem._ws.bm25",
        "planted.py:10: store.workspace('w').tokens",
        "planted.py:11: space.graph",
        "planted.py:11: other.topic_fields",
        "planted.py:12: ws._next_generated",
        "planted.py:13: run.ws.version",
    ]


def test_the_scan_fails_on_a_module_that_reads_a_field():
    """The reading the rule test does, on a module written the old way (reasoner.py before)."""
    old_way = ("def decay(ws, i):\n"
               "    since = ws.created_ts.data[i] if ws.last_decay_ts is None else 0.0\n"
               "    return since, ws.item_ids[i]\n")
    assert workspace_field_reads(old_way, "old.py") == [
        "old.py:2: ws.created_ts", "old.py:2: ws.last_decay_ts", "old.py:3: ws.item_ids"]
    new_way = ("def decay(ws, i):\n"
               "    since = ws.created_column()[i] if ws.last_decay() is None else 0.0\n"
               "    return since, ws.item_id_of(i)\n")
    assert workspace_field_reads(new_way, "new.py") == []


def test_the_interface_and_the_fields_are_apart():
    assert not INTERFACE & FIELDS
    assert {"items", "item_ids", "index_of", "bm25", "eligible", "created_ts", "tokens",
            "activation", "graph", "node_index", "topic_fields", "dense", "content_changes",
            "last_decay_ts", "version", "_workspace_id"} <= FIELDS
    assert {"item", "iter_items", "row_of", "item_id_of", "ids_of", "require", "bm25_for",
            "eligible_mask", "created_column", "token_estimates", "stored_activation",
            "graph_view", "graph_snapshot", "content_changes_since", "dense_index",
            "last_decay", "workspace_id", "graph_version", "__len__"} <= INTERFACE


# ---------------------------------------------------------------------------- the read views
def _workspace() -> tuple[Memory, Workspace]:
    mem = Memory(clock=ManualClock(T0))
    mem.add("deploys run on fridays", item_id="a")
    mem.clock.advance(hours=1)
    mem.add("lunch is pizza", item_id="b", memory_type="procedural")
    mem.add("the auth flow", item_id="c")
    mem.add_edge("a", "c", "RELATED", 0.5)
    return mem, mem.store.workspace(mem.workspace_id)


@pytest.mark.parametrize("view", ["eligible_mask", "created_column", "procedural_mask",
                                  "longterm_mask", "token_estimates", "stored_activation"])
def test_column_views_are_read_only(view):
    _, ws = _workspace()
    column = getattr(ws, view)()
    assert len(column) == 3 and not column.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        column[0] = column[1]


def test_the_read_views_show_the_columns():
    mem, ws = _workspace()
    t0 = T0.timestamp()
    assert ws.created_column().tolist() == [t0, t0 + 3600.0, t0 + 3600.0]
    assert ws.procedural_mask().tolist() == [False, True, False]
    assert ws.stored_activation().tolist() == [0.5, 0.5, 0.5]
    assert [item.item_id for item in ws.iter_items()] == ["a", "b", "c"]
    assert ws.last_decay() is None
    snapshot = ws.graph_snapshot()
    targets, weights = snapshot.out_neighbours(0)
    assert snapshot.num_edges == 1 and (targets.tolist(), weights.tolist()) == ([2], [0.5])
    mem.store.set_last_decay(mem.workspace_id, t0 + 60.0)
    assert ws.last_decay() == t0 + 60.0


def test_content_changes_since_lists_each_changed_item_once():
    mem, ws = _workspace()
    assert ws.content_changes_since(0) == ([], 0)
    for i, text in ((2, "the auth flow, v2"), (0, "deploys run on mondays"),
                    (2, "the auth flow, v3")):
        mem.store.update_item(mem.workspace_id, i, T0, content=text)
    assert ws.content_changes_since(0) == ([0, 2], 3)
    assert ws.content_changes_since(2) == ([2], 3)
    assert ws.content_changes_since(3) == ([], 3)


def test_dense_index_is_built_once_per_name():
    _, ws = _workspace()
    built = []

    def build():
        built.append(1)
        return object()

    first = ws.dense_index("static", build)
    assert ws.dense_index("static", build) is first and built == [1]
    assert ws.dense_index("other", build) is not first and built == [1, 1]


def test_workspace_id_is_read_only():
    _, ws = _workspace()
    assert ws.workspace_id == "default"
    with pytest.raises(AttributeError):
        ws.workspace_id = "other"


# ---------------------------------------------------------------------------- the split
def test_memlab_store_exports_what_it_did_before_the_split():
    import memlab.store as store
    for name in ("MemoryStore", "NewItem", "Workspace", "node_key_of", "paused_gc", "index_text",
                 "COMPACT_AFTER", "REINFORCE_BATCH", "JOURNALED_OPS", "journaled", "_CLASSES",
                 "_PinSession"):
        assert hasattr(store, name), name
    assert sorted(store.__all__) == ["MemoryStore", "NewItem", "Workspace", "node_key_of",
                                     "paused_gc"]
    assert (store.COMPACT_AFTER, store.REINFORCE_BATCH) == (100_000, 64)
    assert sorted(store.JOURNALED_OPS) == [
        "add_anchor", "add_edge_arrays", "add_edges", "add_items", "archive",
        "clear_anchor_flag", "create_workspace", "flag_anchor", "pin", "record_event",
        "record_retrieval", "record_retrievals", "remove_edges", "set_last_decay",
        "set_salience", "set_stored_activation", "set_topic_fields", "unpin", "update_item"]


def test_memory_store_is_composed_of_one_mixin_per_concern():
    assert [c.__module__ for c in MemoryStore.__mro__[:-1]] == [
        "memlab.store.core", "memlab.store.journal", "memlab.store.items",
        "memlab.store.edges", "memlab.store.sessions"]
    # every journaled write is defined in exactly one concern's module
    from memlab.store import JOURNALED_OPS
    homes = {name: getattr(MemoryStore, name).__module__ for name in JOURNALED_OPS}
    assert homes["add_items"] == homes["archive"] == "memlab.store.items"
    assert homes["add_edges"] == homes["remove_edges"] == "memlab.store.edges"
    assert homes["pin"] == homes["flag_anchor"] == "memlab.store.sessions"
    assert homes["create_workspace"] == "memlab.store.core"


def test_the_store_package_imports_nothing_above_it():
    above = ("memlab.memory", "memlab.surfacing", "memlab.session", "memlab.topics",
             "memlab.maintenance", "memlab.harness", "memlab.service", "memlab.cli")
    for path in sorted((ROOT / "store").glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = [node.module for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module] + \
                   [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names]
        assert not [m for m in imported if m.startswith(above)], path.name
