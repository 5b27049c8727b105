"""perf/lab/studies/semantic_cache.py's pure part (rates, Wilson intervals, the chosen threshold) and its corpus."""

from collections import Counter

import numpy as np
import pytest

from perf.lab.studies import semantic_cache as study


def test_wilson_matches_the_textbook_values():
    lo, hi = study.wilson(5, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.2366, 0.7634)
    lo, hi = study.wilson(0, 250)     # none seen: the upper end is z^2 / (n + z^2)
    assert lo == 0.0 and hi == pytest.approx(study.Z95 ** 2 / (250 + study.Z95 ** 2))
    assert study.wilson(20, 20)[1] == 1.0 and study.wilson(0, 0) == (0.0, 1.0)


def test_rates_count_pairs_at_or_above_each_threshold():
    rows = study.rates([0.95, 0.90, 0.80, 0.70], [0.92, 0.75], thresholds=(0.75, 0.90, 0.93))
    assert [(r.threshold, r.hits.k, r.false_hits.k) for r in rows] == [(0.75, 3, 2), (0.90, 2, 1), (0.93, 1, 0)]
    assert rows[0].hits.n == 4 and rows[0].false_hits.n == 2 and rows[1].hits.value == 0.5


def test_chosen_is_the_lowest_threshold_with_false_hits_below_one_percent():
    para = np.linspace(0.7, 1.0, 200)
    near = np.r_[np.full(98, 0.5), 0.85, 0.93]          # 2 of 100 near misses score high
    rows = study.rates(para, near, thresholds=(0.80, 0.85, 0.86, 0.93, 0.94))
    assert study.chosen(rows).threshold == 0.94          # at 0.86 one is left: 1% is not below 1%
    assert study.chosen(rows, max_false_hit_rate=0.015).threshold == 0.86
    assert study.chosen(study.rates(para, np.full(10, 0.99), thresholds=(0.8, 0.9))) is None


def test_report_states_the_default_or_that_none_qualifies():
    pairs = [{"a": f"a{i}", "b": f"b{i}", "label": label, "domain": d, "kind": "k"}
             for i, (label, d) in enumerate([("paraphrase", "math")] * 3 + [("near_miss", "coding")] * 3)]
    cos = np.array([0.99, 0.97, 0.80, 0.60, 0.65, 0.70])
    text = study.report(pairs, cos, np.array([0.1, 0.2]), "cmd", "here")
    assert "**0.71**" in text and "| 0.71 **(default)** | 100.0% (3/3;" in text
    text = study.report(pairs, np.r_[cos[:3], 1.0, 1.0, 1.0], np.array([0.1]), "cmd", "here")
    assert "**None**" in text and "Nor does any threshold" in text


def test_a_rewritten_report_keeps_its_hand_written_notes(tmp_path):
    path = tmp_path / "r.md"
    assert study.kept_notes(path) == ""
    path.write_text("# old figures\n" + study.NOTES_MARKER + "\nmy reading\n")
    assert study.kept_notes(path) == "\n" + study.NOTES_MARKER + "\nmy reading\n"


def test_the_corpus_has_enough_distinct_pairs_of_each_label_in_every_domain():
    pairs = study.load_pairs()
    labels = Counter(p["label"] for p in pairs)
    assert labels["paraphrase"] >= 250 and labels["near_miss"] >= 250
    domains = {"coding", "support", "travel", "cooking", "health", "finance", "math", "trivia", "writing"}
    for label in labels:
        assert {p["domain"] for p in pairs if p["label"] == label} == domains
    assert len({(p["a"], p["b"]) for p in pairs}) == len(pairs)
    assert all(p["a"] != p["b"] for p in pairs)
    assert any(not p["a"].isascii() for p in pairs)     # non-English and odd Unicode are in it
