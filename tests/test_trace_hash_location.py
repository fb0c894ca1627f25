"""A trace's hash is a function of the data, not of where the data lies (CI clones the project
elsewhere; recipe provenance and ranker manifests record trace hashes)."""

import shutil

from memlab.datasets import FIXTURES_DIR
from memlab.datasets.loaders import load_hipporag, load_locomo


def _copies(tmp_path, *names):
    out = []
    for where in ("a", "b/deeper"):
        folder = tmp_path / where
        folder.mkdir(parents=True)
        out.append([shutil.copy(FIXTURES_DIR / name, folder / name) for name in names])
    return out


def test_locomo_hash_is_the_same_in_two_directories(tmp_path):
    (first,), (second,) = _copies(tmp_path, "locomo_sample.json")
    one, two = load_locomo(first), load_locomo(second)
    assert one.metadata["source"] == "locomo_sample.json"
    assert one.hash() == two.hash()


def test_hipporag_hash_is_the_same_in_two_directories(tmp_path):
    first, second = _copies(tmp_path, "hipporag_sample.json", "hipporag_sample_corpus.json")
    one, two = load_hipporag(*first), load_hipporag(*second)
    assert (one.metadata["source"], one.metadata["corpus"]) == \
        ("hipporag_sample.json", "hipporag_sample_corpus.json")
    assert one.hash() == two.hash()


def test_the_hash_still_follows_the_content(tmp_path):
    (first,), (second,) = _copies(tmp_path, "locomo_sample.json")
    second.write_text(second.read_text().replace("pottery class", "poetry class", 1))
    assert load_locomo(first).hash() != load_locomo(second).hash()
