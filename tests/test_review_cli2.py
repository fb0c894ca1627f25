"""The outside review's remaining findings 4, 5, 6, 9 (metadata keys), 10 and 11.

Each ``test_review_*`` test failed on the code before its fix: configuration fields validated on
construction (router rules and strategies against their registries), hostile command-line input
without a traceback, failed commands leaving no folders behind, metadata keys that survive a
reopen, ``memory_type="anchor"`` refused outside ``add_anchor``, and help text as printed.
"""

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlab.cli import main
from memlab.surfacing.config import DEFAULT, SurfacingConfig

from _support import assert_one_line_error, cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------- 4: configuration validation
def test_review_router_rules_checked_against_the_registry_on_construction():
    with pytest.raises(ValueError, match=r"router_rules names 'nope', which is not registered"):
        DEFAULT.replace(router_rules=("nope",))
    with pytest.raises(ValueError, match=r"router_rules must be a list .*got 1"):
        DEFAULT.replace(router_rules=1)
    with pytest.raises(ValueError, match=r"router_rules .*'nope'"):
        DEFAULT.replace(router_rules="nope")  # a string is not a list of names
    with pytest.raises(ValueError, match=r"strategies names 'gone' \(for 'deep:multi-hop'\)"):
        DEFAULT.replace(strategies={"fast:recency": "recency", "deep:multi-hop": "gone"})
    with pytest.raises(ValueError, match=r"activation_model names 'nope'"):
        DEFAULT.replace(activation_model="nope")
    with pytest.raises(ValueError, match=r"entity_detector names 'nope'"):
        DEFAULT.replace(entity_detector="nope")
    assert DEFAULT.replace(router_rules=["recency_words"]).router_rules == ("recency_words",)


def test_review_router_rules_registered_later_are_not_known_at_construction():
    from memlab.surfacing.router import ROUTER_RULES, register_router_rule
    with pytest.raises(ValueError, match="router_rules names 'review_later'"):
        DEFAULT.replace(router_rules=("review_later",))
    register_router_rule("review_later", lambda q: None)
    try:
        assert DEFAULT.replace(router_rules=("review_later",)).router_rules == ("review_later",)
    finally:
        ROUTER_RULES.pop("review_later")


def test_review_config_file_with_an_unknown_rule_blames_the_config(capsys, tmp_path):
    config = tmp_path / "rules.json"
    config.write_text('{"router_rules": ["nope"]}')
    code, lines = cli(capsys, "replay", "fixture:apollo_demo", "--config", str(config),
                      "--out", str(tmp_path / "out"))
    assert_one_line_error(code, lines, "replay", "rules.json", "router_rules names 'nope'")
    assert "event" not in lines[0]


def test_review_sweep_grid_with_a_bad_router_rules_value_is_one_line(capsys, tmp_path):
    code, lines = cli(capsys, "sweep", "fixture:apollo_demo", "--grid", "router_rules=1",
                      "--out", str(tmp_path / "out"))
    assert_one_line_error(code, lines, "sweep", "router_rules", "1")


_GARBAGE = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8), st.binary(max_size=4),
    st.lists(st.one_of(st.integers(), st.text(max_size=4), st.none()), max_size=3),
    st.tuples(st.text(max_size=4), st.one_of(st.none(), st.integers(), st.text(max_size=4))),
    st.lists(st.lists(st.one_of(st.text(max_size=14), st.none(), st.integers()), max_size=3),
             max_size=3),
    st.dictionaries(st.one_of(st.text(max_size=6), st.integers()),
                    st.one_of(st.none(), st.integers(), st.floats(), st.text(max_size=6)),
                    max_size=3),
    st.sampled_from(["fast:recency", "recency", "nope", "seed", "porter", object()]),
)
_FIELDS = [f.name for f in dataclasses.fields(SurfacingConfig)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(_FIELDS), value=_GARBAGE)
def test_review_every_field_rejects_garbage_with_value_error(field, value):
    try:
        cfg = DEFAULT.replace(**{field: value})
    except ValueError as exc:
        assert field in str(exc), (field, value, str(exc))
        return
    # accepted: it must be a value of the field's kind, and round-trip through to_dict
    assert SurfacingConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


@settings(max_examples=100, deadline=None)
@given(data=st.dictionaries(st.one_of(st.sampled_from(_FIELDS), st.text(max_size=5),
                                      st.integers()), _GARBAGE, max_size=3))
def test_review_from_dict_raises_value_error_only(data):
    try:
        SurfacingConfig.from_dict(data)
    except ValueError:
        pass
    with pytest.raises(ValueError, match="data"):
        SurfacingConfig.from_dict([("name", "x")])


# ------------------------------------------------------------- 5: hostile command-line input
@pytest.mark.parametrize("spec, fragment", [
    ("synthetic:10000000000:1", "n_items must be an integer in 10..10,000,000"),
    ("synthetic:100:10000000000", "n_queries must be an integer in 0..1,000,000"),
])
def test_review_synthetic_sizes_are_bounded(capsys, tmp_path, spec, fragment):
    code, lines = cli(capsys, "replay", spec, "--out", str(tmp_path / "out"))
    assert_one_line_error(code, lines, "replay", spec, fragment)


def test_review_synthetic_trace_limits_in_the_library():
    from memlab.datasets.synthetic import synthetic_trace
    with pytest.raises(ValueError,
                       match="n_queries must be an integer in 0..1,000,000, got 1000001"):
        synthetic_trace(10, 1_000_001)


def _deep(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


def test_review_deeply_nested_config_file_is_one_line(capsys, tmp_path):
    config = tmp_path / "deep.json"
    config.write_text(_deep(5000))
    code, lines = cli(capsys, "replay", "fixture:apollo_demo", "--config", str(config),
                      "--out", str(tmp_path / "out"))
    assert_one_line_error(code, lines, "replay", "--config", "deep.json", "nested too deeply")


def test_review_deeply_nested_trace_line_names_the_line(capsys, tmp_path):
    trace = tmp_path / "deep.jsonl"
    trace.write_text('{"type": "header", "format": "memlab-trace", "version": 1}\n'
                     + _deep(5000) + "\n")
    code, lines = cli(capsys, "replay", str(trace), "--out", str(tmp_path / "out"))
    assert_one_line_error(code, lines, "replay", "deep.jsonl", "line 2", "nested too deeply")


def test_review_deeply_nested_grid_value_is_one_line(capsys, tmp_path):
    code, lines = cli(capsys, "sweep", "fixture:apollo_demo", "--grid",
                      "centrality_weight=" + "[" * 5000, "--out", str(tmp_path / "out"))
    assert_one_line_error(code, lines, "sweep", "--grid", "nested too deeply")


@pytest.mark.parametrize("error, fragment", [(RecursionError, "nested too deeply"),
                                             (MemoryError, "out of memory")])
def test_review_main_never_prints_a_traceback_for_recursion_or_memory(capsys, monkeypatch,
                                                                      tmp_path, error, fragment):
    import memlab.cli

    def boom(args):
        raise error()
    monkeypatch.setattr(memlab.cli, "_run", boom)
    code, lines = cli(capsys, "replay", "fixture:apollo_demo", "--out", str(tmp_path / "out"))
    assert_one_line_error(code, lines, "replay", fragment)


# ------------------------------------------------------------- 6: failed commands leave no folders
@pytest.mark.parametrize("args", [
    ["replay", "missing.jsonl"],
    ["sweep", "missing.jsonl", "--grid", "centrality_weight=0,1"],
    ["experiment", "missing.jsonl", "--config", "a=default"],
    ["replay", "missing.jsonl", "--out", "new/nested/folder"],
    ["eval", "--data", "no-such-data", "--out", "new/eval"],
])
def test_review_a_failed_command_leaves_no_output_folder(capsys, monkeypatch, tmp_path, args):
    monkeypatch.chdir(tmp_path)
    code, lines = cli(capsys, *args)
    assert_one_line_error(code, lines, args[0])
    assert list(tmp_path.iterdir()) == []


def test_the_write_still_makes_the_checked_folder(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    code, _ = cli(capsys, "replay", "fixture:apollo_demo", "--out", "new/nested/replay")
    assert code == 0
    assert (tmp_path / "new" / "nested" / "replay" / "manifest.json").is_file()


@pytest.mark.parametrize("command", [["demo"], ["replay", "fixture:apollo_demo"],
                                     ["sweep", "fixture:apollo_demo", "--grid", "k=1"]])
@pytest.mark.parametrize("out", ["", "   "])
def test_review_empty_out_is_refused(capsys, monkeypatch, tmp_path, command, out):
    monkeypatch.chdir(tmp_path)
    code, lines = cli(capsys, *command, "--out", out)
    assert_one_line_error(code, lines, command[0], "--out must name a folder")
    assert list(tmp_path.iterdir()) == []


def test_review_empty_record_and_json_files_are_refused(capsys):
    from memlab.cli import _Fail, _writable_file
    for value in ("", " "):
        with pytest.raises(_Fail, match="--json must name a file"):
            _writable_file("--json", value)


# ------------------------------------------------------------- 11: eval names --data
def test_review_eval_error_names_the_data_option(capsys, tmp_path):
    code, lines = cli(capsys, "eval", "--data", str(tmp_path / "nothing"), "--out",
                      str(tmp_path / "out"))
    assert_one_line_error(code, lines, "eval", "--data", "nothing")
    assert "data_root" not in lines[0]


# ------------------------------------------------------------- 11: help text and demo table
@pytest.mark.parametrize("command", ["", "demo", "replay", "experiment", "sweep", "eval",
                                     "serve", "mcp", "bench"])
def test_review_every_help_renders_without_format_escapes(capsys, command):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"] if command else ["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "%%" not in text and "%(" not in text, text
    if command == "experiment":
        assert "bootstrap 95% intervals" in " ".join(text.split())


def test_review_demo_table_prints_both_p_values(tmp_path, capsys):
    # issue 16: the demo prints the paired comparisons with the raw and the Holm-adjusted
    # Wilcoxon p; the CSV keeps both tests' raw p-values
    from memlab.demo import run_demo
    experiment = run_demo(tmp_path, k=10)
    table = capsys.readouterr().out.split("=== experiment:")[1]
    for column in ("p_ttest", "p_wilcoxon"):
        assert any(column in c for c in experiment.table.columns)
    assert "| name | vs | measure | n | delta [CI] | d_z | p | p (holm) |" in table, table
    assert "Holm–Bonferroni" in table


# ------------------------------------------------------------- 9: metadata keys are strings
def _bad_key_writes(mem):
    from memlab.session.longterm import upsert_node
    from memlab.topics import ingest
    return {
        "add": lambda: mem.add("x", metadata={1: "a"}),
        "add nested": lambda: mem.add("x", metadata={"a": [{"b": {None: 1}}]}),
        "add_many": lambda: mem.add_many([{"content": "x", "metadata": {"a": {2.5: 1}}}]),
        "add_anchor": lambda: mem.add_anchor("s1", "goal", metadata={True: 1}),
        "upsert_node": lambda: upsert_node("s1", "entity", "Bob", "bob", metadata={"a": {3: 1}},
                                           memory=mem),
        "topic json field": lambda: ingest("new_topic", title="T",
                                           fields={"f": {"value": {4: "x"}, "type": "json"}},
                                           memory=mem),
    }


@pytest.mark.parametrize("write", list(_bad_key_writes(None)))
def test_review_metadata_keys_must_be_strings_at_every_depth(tmp_path, write):
    from memlab import Memory
    mem = Memory(path=str(tmp_path / "m.db"))
    with pytest.raises(ValueError, match=r"keys must be strings at every depth, got key"):
        _bad_key_writes(mem)[write]()
    assert len(mem.store.workspace("default").items) == 0  # nothing written


def test_string_keyed_metadata_survives_a_reopen(tmp_path):
    from memlab import Memory
    mem = Memory(path=str(tmp_path / "m.db"))
    meta = {"a": {"b": [{"c": 1}]}, "1": "one"}
    mem.add("x", item_id="x", metadata=meta)
    mem.store.close()
    again = Memory(path=str(tmp_path / "m.db"))
    assert again.get("x")["metadata"] == meta


# ------------------------------------------------------------- 10: anchors only via add_anchor
def test_review_memory_type_anchor_is_refused_outside_add_anchor(router):
    with pytest.raises(ValueError, match=r"memory_type 'anchor' .*add_anchor"):
        router.add("a goal", memory_type="anchor")
    with pytest.raises(ValueError, match=r"items\[1\]: memory_type 'anchor' .*add_anchor"):
        router.add_many(["fine", {"content": "a goal", "memory_type": "anchor"}])
    assert len(router.store.workspace("ws-a").items) == 0
    anchor = router.add_anchor("s1", "a goal")
    assert router.get(anchor)["memory_type"] == "anchor"


def test_review_trace_add_event_with_an_anchor_type_is_refused():
    from memlab.harness import ReplayError, TraceBuilder, replay
    trace = (TraceBuilder("anchor", start="2024-01-01T00:00:00+00:00")
             .add("a goal", item_id="g", memory_type="anchor")
             .query("q1", "goal", gold=["g"]).build())
    with pytest.raises(ReplayError, match=r"event 0 .*memory_type 'anchor' .*add_anchor"):
        replay(trace)


def test_pinning_another_sessions_anchor_shows_it_to_the_pinning_session(router):
    # the README's "Pins and anchors": a pin is an explicit request, so it wins over the
    # anchor's session scope; sessions that neither own nor pin the anchor never see it
    router.add("alpha notes", item_id="n")
    anchor = router.add_anchor("s1", "the goal of session one")
    router.pin_item("s2", anchor)

    def ids(session):
        return [it["item_id"] for it in router.get_working_context(session, "alpha")["items"]]
    assert anchor in ids("s1") and anchor in ids("s2") and anchor not in ids("s3")
    router.unpin_item("s2", anchor)
    assert anchor not in ids("s2")
