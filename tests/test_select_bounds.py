"""bench/select_bounds.py: the leaf tables it counts pruning with are the model's costs and
sound bounds of them, and the pruning it simulates keeps the best candidates."""

import numpy as np

from bench.select_bounds import (BOUNDS, ORDERS, LeafTables, leaf_tables, operator_figures,
                                 pruned_share, pruned_sums, tree_order)
from farm.select.export import MODEL
from farm.select.guard import reference_flags
from tests.test_select import fwd, problems  # noqa: F401 - fwd: the trained model


def test_leaf_tables_sum_to_the_costs_within_their_bounds(fwd):
    """The exit leaves sum to LightGBM's costs; the shape's bounds hold each exit leaf and lie
    within the fixed ones, which hold every leaf each candidate reaches on any shape."""
    s = fwd.slow
    shapes = problems("conv2d_fwd", 40, seed=41)
    tables = leaf_tables(s, fwd.files[MODEL], shapes)
    np.testing.assert_allclose(tables.cost.sum(axis=2), [s.costs(p) for p in shapes],
                               rtol=1e-12, atol=1e-9)
    assert (tables.shape_low <= tables.cost).all() and (tables.cost <= tables.shape_high).all()
    assert (tables.fixed_low <= tables.shape_low).all()
    assert (tables.shape_high <= tables.fixed_high).all()
    assert (tables.shape_low < tables.shape_high).any()  # not every leaf known from the shape


def test_pruning_keeps_the_best_and_drops_where_bounds_are_tight(fwd):
    """Every order and bounds keep the three best of every candidate (pruned_share asserts it)
    and compute at most every sum; with the later trees' leaves shrunk to nothing (a model
    whose bounds are tight), the shape's bounds leave most candidates out after one block."""
    s = fwd.slow
    shapes = problems("conv2d_fwd", 30, seed=42)
    tables = leaf_tables(s, fwd.files[MODEL], shapes)
    reference = reference_flags([e.family for e in s.catalogue])
    everyone = np.ones((len(shapes), len(s.catalogue)), bool)
    for order in ORDERS:
        for bounds in BOUNDS:
            assert 0 < pruned_share(tables, everyone, reference, order, bounds, 3, 2) <= 1
    later = np.arange(tables.cost.shape[2]) >= 8
    zero = lambda a: np.where(later, 0.0, a)  # noqa: E731
    tight = LeafTables(zero(tables.cost), zero(tables.fixed_low), zero(tables.fixed_high),
                       zero(tables.shape_low), zero(tables.shape_high), tables.spread)
    kept = [len(pruned_sums(tight, i, np.arange(len(s.catalogue)), ~reference,
                            tree_order(tight, "model"), tight.bounds("shape"), 1, 2)[1])
            for i in range(len(shapes))]
    assert np.median(kept) < len(s.catalogue) / 4


def test_operator_figures_report_each_question(fwd):
    figures = operator_figures(fwd.slow, fwd.files[MODEL], problems("conv2d_fwd", 12, seed=43))
    for question in ("best_rules_mask", "every_candidate_top_3"):
        shares = figures[question]["share_summed"]
        assert len(shares) == len(ORDERS) * len(BOUNDS)
        assert all(0 < v <= 1 for v in shares.values())
        assert figures[question]["shape bounds"]["width_after_first_block"] >= 0
