"""Round 6's outside checks: each test failed before its fix."""

import pytest

from memlab.surfacing.stages.ranker_features import query_entities


# a name in possessive form ("Melanie's pup") is the name, for rf_speaker and rf_entities
@pytest.mark.parametrize("query, expected", [
    ("What is Melanie's pup called?", ["melanie"]),
    ("Where is Jon\u2019s dance studio?", ["jon"]),
    ("Did James' car break down after Caroline's trip?", ["james", "caroline"]),
    ("When did Caroline go to the LGBTQ support group?", ["caroline", "lgbtq"]),
])
def test_query_entities_drop_the_possessive(query, expected):
    assert query_entities(query) == expected


def test_rf_speaker_names_the_speaker_of_a_possessive_question():
    from memlab import Memory
    from memlab.surfacing.config import DEFAULT
    mem = Memory(surfacing_mode="router", config=DEFAULT.replace(ranker_features=True))
    mem.add("Melanie: I adopted a pup last week, his name is Oscar", item_id="m1",
            metadata={"speaker": "Melanie"})
    mem.add("Caroline: I adopted a pup in spring", item_id="c1", metadata={"speaker": "Caroline"})
    mem.get_working_context("s", "What is Melanie's pup called?")
    cands = mem.last_context_record.candidates
    speaker = dict(zip(cands["item_id"], cands["rf_speaker"]))
    entities = dict(zip(cands["item_id"], cands["rf_entities"]))
    assert speaker == {"m1": 1.0, "c1": 0.0}
    assert entities == {"m1": 1.0, "c1": 0.0}
