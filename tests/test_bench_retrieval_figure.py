"""The retrieval figure's labels: a method's name sits next to its marker, inside the axes, and
covers no other name, marker or error bar where another offset allows it (SciFact's queue and
ST-mined rows cost and score almost alike)."""

from __future__ import annotations

import pytest

from tests.bench_modules import load_bench

LIMITS = ((370.0, 1880.0), (64.0, 75.2))  # the SciFact panel's axes, 450 x 300 points
SIZE = (450.0, 300.0)


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_retrieval")


def test_far_apart_points_keep_the_first_offset(bench):
    offsets = bench.label_offsets([(435.0, 67.25), (1000.0, 70.0)], ["queue_hard (1)", "cached_mnrl (1)"], LIMITS, SIZE)
    assert offsets == [bench.LABEL_OFFSETS[0]] * 2


def test_a_label_that_would_leave_the_axes_goes_to_the_left(bench):
    # at x = 1870 the marker sits 3 points from the right edge: a label to its right would be cut off
    assert bench.label_offsets([(1870.0, 70.0)], ["queue_ance (1)"], LIMITS, SIZE) == [(-5, 4)]


def test_a_label_that_would_cover_a_neighbour_moves_to_the_next_free_offset(bench):
    # queue_corpus_mined at (1299, 73.28); mnrl_st_mined at (1411, 73.49) with an error bar of ± 0.34:
    # 33 points apart, so queue_corpus_mined's 101-point label would cross the other marker's error
    # bar above (5, 4) and below (5, -11); it goes left. mnrl_st_mined's label then keeps (5, 4).
    points, errors = [(1299.0, 73.28), (1411.0, 73.49)], [0.0, 0.34]
    offsets = bench.label_offsets(points, ["queue_corpus_mined (1)", "mnrl_st_mined (3)"], LIMITS, SIZE, errors)
    assert offsets == [(-5, 4), (5, 4)]
    # without the error bar the lower place is free
    assert bench.label_offsets(points, ["queue_corpus_mined (1)", "mnrl_st_mined (3)"], LIMITS, SIZE)[0] == (5, -11)


def test_label_boxes_are_disjoint_for_a_crowded_cluster(bench):
    points = [(1000.0 + i, 70.0) for i in range(4)]
    offsets = bench.label_offsets(points, [f"method_{i} (3)" for i in range(4)], LIMITS, SIZE)
    assert len(set(offsets)) == 4  # four markers on one spot: four different places
