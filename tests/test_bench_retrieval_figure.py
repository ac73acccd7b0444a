"""The retrieval figure's labels: a method's name sits next to its marker and no two names overlap
where another offset allows it (SciFact's queue and ST-mined rows cost and score almost alike)."""

from __future__ import annotations

import pytest

from tests.bench_modules import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_retrieval")


def test_far_apart_points_keep_the_first_offset(bench):
    points = [(400.0, 67.0), (1800.0, 74.0)]
    assert bench.label_offsets(points, ["queue_hard (1)", "queue_ance (1)"]) == [bench.LABEL_OFFSETS[0]] * 2


def test_a_label_that_would_cover_another_moves_to_the_next_free_offset(bench):
    # the seed-0 grid's near-collision: queue_corpus_mined at (1299, 73.28) and mnrl_st_mined at (1437, 73.35)
    # on an axes spanning 435-1809 s and 67.25-74.10 points
    points = [(435.0, 67.25), (1299.0, 73.28), (1437.0, 73.35), (1809.0, 74.10)]
    labels = ["queue_hard (1)", "queue_corpus_mined (1)", "mnrl_st_mined (2)", "queue_ance (1)"]
    offsets = bench.label_offsets(points, labels)
    assert offsets[:2] == [(5, 4), (5, 4)]
    assert offsets[2] == (5, -11)  # at (5, 4) it would overlap queue_corpus_mined's label, 45 points to its left


def test_label_boxes_are_disjoint_for_a_crowded_cluster(bench):
    points = [(1000.0 + i, 70.0) for i in range(4)] + [(0.0, 60.0), (2000.0, 80.0)]
    labels = [f"method_{i} (3)" for i in range(6)]
    offsets = bench.label_offsets(points, labels)
    assert len(set(offsets[:4])) == 4  # four markers on one spot: four different places
