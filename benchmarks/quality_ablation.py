"""What each part of the recipes earns on MuSiQue: the README's ablation, reproducible.

    .venv/bin/python benchmarks/quality_ablation.py [../shared/datasets] [--dense]

Each row adds one thing to the row above it and replays HippoRAG's MuSiQue 100-question set
(R@5, R@10, MRR in %, k = 20). The dense rows need the ``dense`` extra.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from memlab.datasets.loaders import load_hipporag
from memlab.harness.replay import replay
from memlab.datasets import shared_data_dir
from memlab.surfacing.config import DEFAULT


def main(argv: list[str]) -> pd.DataFrame:
    dense = "--dense" in argv
    paths = [a for a in argv if not a.startswith("--")]
    root = Path(paths[0]) if paths else shared_data_dir()  # $MEMLAB_SHARED_DATA or ../shared
    files = (root / "hipporag" / "musique_train.json", root / "hipporag" / "musique_train_corpus.json")
    titles_only = load_hipporag(*files, graph=("title_mentions",))
    both = load_hipporag(*files)  # the default: title mentions and shared entities
    before = DEFAULT.replace(name="default-no-title-match", title_match_weight=0.0)
    rows = [("base: DEFAULT before title match, title-mention graph", before, titles_only),
            ("+ title match 0.25", DEFAULT, titles_only),
            ("+ shared-entity links", DEFAULT, both)]
    if dense:
        from memlab.signals.dense import DenseConfig
        rows += [("dense: hybrid 0.5, title-mention graph",
                  before.replace(dense=DenseConfig(sentence_weight=0.0)), titles_only),
                 ("+ title match 0.25", DEFAULT.replace(dense=DenseConfig(sentence_weight=0.0)),
                  titles_only),
                 ("+ shared-entity links", DEFAULT.replace(dense=DenseConfig(sentence_weight=0.0)),
                  both),
                 ("+ best sentence at 0.3 (the dense recipe)", DEFAULT.replace(dense=DenseConfig()),
                  both),
                 ("  (min-max fusion instead of max)",
                  DEFAULT.replace(dense=DenseConfig(normalise="minmax")), both)]
    out = []
    for name, config, trace in rows:
        result = replay(trace, config, k=20, measures=["R@5", "R@10", "MRR"],
                        record_candidates=False, progress=False)
        means = (result.metrics.groupby("measure")["value"].mean() * 100).round(1)
        out.append({"step": name, **means.to_dict()})
    table = pd.DataFrame(out)[["step", "R@5", "R@10", "MRR"]]
    print(table.to_string(index=False))
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
