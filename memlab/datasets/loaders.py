"""Loaders that turn public datasets into replayable traces (SPEC §8, §10).

``load_locomo``
    LoCoMo: each conversation is its own workspace (named by its ``sample_id``). Each turn is an
    episodic item ``dia_id`` stored at its session's timestamp ("1:56 pm on 8 May, 2023"), with
    the speaker kept (in the metadata and, as ``"Speaker: text"``, in the content) and an image's
    caption appended. Each question is asked one minute after the conversation's last session,
    with its evidence turn ids as graded gold (1) and its ``category`` kept. Malformed evidence
    ids (or ids that point nowhere) are skipped and counted in ``trace.metadata``.
``load_hipporag``
    HippoRAG-format multi-hop QA: the corpus's passages are items ``p<index>`` with content
    ``title + "\\n" + text``; gold comes from ``paragraphs[*].is_supporting`` (MuSiQue) or
    ``supporting_facts`` titles (2WikiMultihopQA, HotpotQA).
``load_longmemeval``
    LongMemEval: each question has its own haystack, so its own workspace. Turns are items
    ``<session_id>:<turn>`` at their session's date; gold is the turns marked ``has_answer``,
    else every turn of the answer sessions. The question is asked at ``question_date``.

Every loader builds edges with :mod:`memlab.datasets.graphs` (``graph=`` picks builders by
name, or None for none) and records what it did in ``trace.metadata``. The metadata names a
source by its file name, never its directory, so a trace's hash (what manifests and recipe
provenance record) is the same wherever the data lies.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterable

from memlab.datasets.graphs import build_edges
from memlab.harness.trace import Trace, TraceBuilder

__all__ = ["load_locomo", "load_hipporag", "load_longmemeval", "parse_locomo_time",
           "LOCOMO_CATEGORIES"]

LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop",
                     5: "adversarial"}
_LOCOMO_TIME = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+"
                          r"(\d{4})\s*$", re.IGNORECASE)


def _read_json(path: str | Path, name: str) -> Any:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{name} {str(path)!r} is not a file")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} {str(path)!r} is not valid JSON: {exc.msg} at line "
                         f"{exc.lineno}") from None


def parse_locomo_time(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` → ``2023-05-08 13:56 UTC`` (LoCoMo gives no zone).

    Examples
    --------
    >>> parse_locomo_time("1:56 pm on 8 May, 2023").isoformat()
    '2023-05-08T13:56:00+00:00'
    >>> parse_locomo_time("12:09 am on 13 September, 2023").isoformat()
    '2023-09-13T00:09:00+00:00'
    """
    match = _LOCOMO_TIME.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"session time must look like '1:56 pm on 8 May, 2023', got {text!r}")
    hour, minute, half, day, month, year = match.groups()
    hour = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    stamp = datetime.strptime(f"{day} {month[:3]} {year}", "%d %b %Y")
    return stamp.replace(hour=hour, minute=int(minute), tzinfo=timezone.utc)


def _sessions(conversation: dict) -> list[tuple[int, datetime, list[dict]]]:
    out = []
    for key, turns in conversation.items():
        match = re.fullmatch(r"session_(\d+)", key)
        if match and isinstance(turns, list):
            number = int(match.group(1))
            out.append((number, parse_locomo_time(conversation[f"{key}_date_time"]), turns))
    return sorted(out)


def load_locomo(path: str | Path, *, graph: Iterable[str] | None = ("turn_adjacency",
                                                                    "session_adjacency"),
                speaker_in_content: bool = True, conversations: Iterable[str] | None = None,
                query_delay: timedelta = timedelta(minutes=1)) -> Trace:
    """LoCoMo as a trace (see the module notes).

    Examples
    --------
    >>> from memlab.datasets import FIXTURES_DIR
    >>> trace = load_locomo(FIXTURES_DIR / "locomo_sample.json")
    >>> len(trace.queries), trace.metadata["skipped_evidence"]
    (4, 1)
    """
    data = _read_json(path, "path")
    if not isinstance(data, list):
        raise ValueError(f"path {str(path)!r} must hold a list of LoCoMo conversations")
    wanted = None if conversations is None else set(conversations)
    timeline: list[tuple[datetime, int, str, dict]] = []  # (ts, order, kind, payload)
    skipped: list[dict] = []
    turns_total = 0
    for record in data:
        sample = record["sample_id"]
        if wanted is not None and sample not in wanted:
            continue
        sessions = _sessions(record["conversation"])
        if not sessions:
            continue
        rows = []
        for number, ts, turns in sessions:
            for turn in turns:
                text = turn.get("text", "")
                if turn.get("blip_caption"):
                    text = f"{text} [image: {turn['blip_caption']}]"
                content = f"{turn['speaker']}: {text}" if speaker_in_content else text
                rows.append({"item_id": turn["dia_id"], "content": content, "ts": ts,
                             "metadata": {"speaker": turn["speaker"], "session": number,
                                          "conversation": sample, "dia_id": turn["dia_id"]}})
        turns_total += len(rows)
        ids = {r["item_id"] for r in rows}
        for r in rows:
            timeline.append((r["ts"], len(timeline), "add", {**r, "workspace_id": sample}))
        for src, dst, kind, weight in build_edges(rows, graph):
            timeline.append((sessions[-1][1], len(timeline), "edge",
                             {"src": src, "dst": dst, "edge_type": kind, "weight": weight,
                              "workspace_id": sample}))
        asked = sessions[-1][1] + query_delay
        for n, qa in enumerate(record.get("qa", [])):
            gold = []
            for evidence in qa.get("evidence", []):
                if evidence in ids:
                    gold.append(evidence)
                else:
                    skipped.append({"conversation": sample, "question": n, "evidence": evidence})
            timeline.append((asked, len(timeline), "query",
                             {"qid": f"{sample}/q{n}", "query": qa["question"],
                              "gold": list(dict.fromkeys(gold)), "category": qa.get("category"),
                              "session_id": sample, "workspace_id": sample}))
    return _timeline_trace("locomo", timeline, {
        "source": Path(path).name, "conversations": sorted({e[3]["workspace_id"] for e in timeline}),
        "turns": turns_total, "skipped_evidence": len(skipped), "skipped": skipped,
        "graph": list(graph) if graph is not None else [], "categories": LOCOMO_CATEGORIES})


def load_hipporag(questions_path: str | Path, corpus_path: str | Path, *,
                  graph: Iterable[str] | None = ("title_mentions", "shared_entities"),
                  start: datetime = datetime(2024, 1, 1, tzinfo=timezone.utc)) -> Trace:
    """HippoRAG-format multi-hop QA as a trace (see the module notes).

    Examples
    --------
    >>> from memlab.datasets import FIXTURES_DIR
    >>> trace = load_hipporag(FIXTURES_DIR / "hipporag_sample.json",
    ...                       FIXTURES_DIR / "hipporag_sample_corpus.json")
    >>> len(trace.queries), trace.queries[0].get("gold")
    (2, ['p0', 'p2'])
    """
    questions = _read_json(questions_path, "questions_path")
    corpus = _read_json(corpus_path, "corpus_path")
    if not isinstance(questions, list) or not isinstance(corpus, list):
        raise ValueError("questions_path and corpus_path must each hold a JSON list")
    rows = []
    by_text: dict[tuple[str, str], str] = {}
    by_title: dict[str, list[str]] = {}
    for index, passage in enumerate(corpus):
        if not isinstance(passage, dict) or "title" not in passage or "text" not in passage:
            raise ValueError(f"corpus_path entry {index} must have 'title' and 'text'")
        item_id = f"p{index}"
        rows.append({"item_id": item_id, "content": f"{passage['title']}\n{passage['text']}",
                     "metadata": {"title": passage["title"]}})
        by_text.setdefault((passage["title"], passage["text"].strip()), item_id)
        by_title.setdefault(passage["title"], []).append(item_id)
    builder = TraceBuilder(Path(questions_path).stem, start=start)
    builder.add_many({"content": r["content"], "item_id": r["item_id"],
                      "metadata": r["metadata"]} for r in rows)
    for src, dst, kind, weight in build_edges(rows, graph):
        builder.edge(src, dst, kind, weight)
    unmatched = 0
    for n, q in enumerate(questions):
        gold: list[str] = []
        if "paragraphs" in q:
            for p in q["paragraphs"]:
                if p.get("is_supporting"):
                    text = (p.get("paragraph_text") or p.get("text") or "").strip()
                    found = by_text.get((p["title"], text)) or (by_title.get(p["title"]) or
                                                                [None])[0]
                    if found is None:
                        unmatched += 1
                    else:
                        gold.append(found)
        for title, _ in q.get("supporting_facts", []):
            found = (by_title.get(title) or [None])[0]
            if found is None:
                unmatched += 1
            else:
                gold.append(found)
        builder.query(str(q.get("id", q.get("_id", f"q{n}"))), q["question"],
                      gold=list(dict.fromkeys(gold)))
    builder.metadata.update({"source": Path(questions_path).name, "corpus": Path(corpus_path).name,
                             "passages": len(rows), "unmatched_gold": unmatched,
                             "graph": list(graph) if graph is not None else []})
    return builder.build()


def load_longmemeval(path: str | Path, *, graph: Iterable[str] | None = ("turn_adjacency",),
                     questions: Iterable[str] | None = None) -> Trace:
    """LongMemEval (its published JSON format) as a trace (see the module notes).

    Examples
    --------
    >>> from memlab.datasets import FIXTURES_DIR
    >>> trace = load_longmemeval(FIXTURES_DIR / "longmemeval_sample.json")
    >>> [(q.get("qid"), q.get("category"), q.get("gold")) for q in trace.queries][:1]
    [('lme-001', 'single-session-user', ['s-a2:1'])]
    """
    data = _read_json(path, "path")
    if not isinstance(data, list):
        raise ValueError(f"path {str(path)!r} must hold a list of LongMemEval questions")
    wanted = None if questions is None else set(questions)
    timeline: list[tuple[datetime, int, str, dict]] = []
    for record in data:
        qid = record["question_id"]
        if wanted is not None and qid not in wanted:
            continue
        rows = []
        answer_sessions = set(record.get("answer_session_ids", []))
        marked, session_turns = [], []
        for session_id, date, turns in zip(record["haystack_session_ids"],
                                           record["haystack_dates"], record["haystack_sessions"]):
            ts = _lme_time(date)
            for n, turn in enumerate(turns):
                item_id = f"{session_id}:{n}"
                rows.append({"item_id": item_id, "content": f"{turn['role']}: {turn['content']}",
                             "ts": ts, "metadata": {"role": turn["role"], "session": session_id}})
                if turn.get("has_answer"):
                    marked.append(item_id)
                if session_id in answer_sessions:
                    session_turns.append(item_id)
        rows.sort(key=lambda r: r["ts"])
        for r in rows:
            timeline.append((r["ts"], len(timeline), "add", {**r, "workspace_id": qid}))
        last = rows[-1]["ts"] if rows else _lme_time(record["question_date"])
        for src, dst, kind, weight in build_edges(rows, graph):
            timeline.append((last, len(timeline), "edge", {"src": src, "dst": dst,
                                                            "edge_type": kind, "weight": weight,
                                                            "workspace_id": qid}))
        asked = max(_lme_time(record["question_date"]), last)
        timeline.append((asked, len(timeline), "query",
                         {"qid": qid, "query": record["question"],
                          "gold": marked or session_turns,
                          "category": record.get("question_type"), "session_id": qid,
                          "workspace_id": qid}))
    return _timeline_trace("longmemeval", timeline, {
        "source": Path(path).name, "graph": list(graph) if graph is not None else []})


def _timeline_trace(name: str, timeline: list[tuple[datetime, int, str, dict]],
                    metadata: dict) -> Trace:
    """A trace of ``(ts, order, kind, payload)`` entries, in time order (ties: order)."""
    timeline.sort(key=lambda entry: (entry[0], entry[1]))
    builder = TraceBuilder(name, start=timeline[0][0] if timeline else None, metadata=metadata)
    for ts, _, kind, payload in timeline:
        if kind == "add":
            builder.event("add", ts, content=payload["content"], item_id=payload["item_id"],
                          memory_type="episodic", metadata=payload["metadata"],
                          created_at=payload["ts"].isoformat(),
                          workspace_id=payload["workspace_id"])
        elif kind == "edge":
            builder.event("add_edge", ts, **payload)
        else:
            builder.event("query", ts, **payload)
    return builder.build()


def _lme_time(text: str) -> datetime:
    """LongMemEval dates: ``"2023/05/20 (Sat) 02:21"``."""
    match = re.match(r"^\s*(\d{4})/(\d{2})/(\d{2})\s*(?:\([A-Za-z]+\))?\s*(\d{2}):(\d{2})", text) \
        if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"date must look like '2023/05/20 (Sat) 02:21', got {text!r}")
    y, mo, d, h, mi = map(int, match.groups())
    return datetime(y, mo, d, h, mi, tzinfo=timezone.utc)
