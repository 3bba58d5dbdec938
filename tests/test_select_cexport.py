"""The C export's `best` and `rank` against the full costs: they sum only the allowed candidates
(and, generated with pruning, drop those whose bounds show they cannot be needed), yet must
choose exactly what ordering every allowed candidate by its full cost (`costs`, LightGBM's raw
scores) and guarding the head chooses. On a small model trained on SYNTHETIC measurements."""

import ctypes

import numpy as np

from farm.select.cexport import GROUP, _Columns, _Forest, c_source, symbol_prefix
from farm.select.export import MODEL
from farm.select.features import feature_matrix, instance_matrix
from farm.select.guard import guarded_order, reference_flags
from farm.select.selector import compile_shared
from farm.select.trees import leaf_masks, parse_trees
from kernels.conv.problem import CONV_FIELDS, ConvProblem
from kernels.registry import operator_spec
from tests.test_select import DTYPE, fwd, problems  # noqa: F401 - fwd: the trained model

CLONES = 'target_clones("avx512f", "avx2", "default")'


class Export:
    """A Selector's model exported to C (`model_text` for its trees) and loaded through
    ctypes; `portable`: without the vector copies of its loops and the AVX-512 blocks (what
    other machines run)."""

    def __init__(self, selector, model_text: str, folder, portable: bool = False,
                 **options) -> None:
        s = selector
        self.count, self.prefix = len(s.names), symbol_prefix(s.operator, s.arch, s.dtype)
        text_fields = tuple(operator_spec(s.operator).problem_type.TEXT_FIELDS)
        source = c_source(s.spec, s.catalogue, model_text, s.kind, self.prefix, "",
                          s.guard_depth, text_fields, **options)
        if portable:
            assert CLONES in source
            assert "FARM_SELECT_PORTABLE" in source
            source = "#define FARM_SELECT_PORTABLE\n" + source.replace(
                f"__attribute__(({CLONES}))", "")
        self.lib = ctypes.CDLL(str(compile_shared(source, folder)))

    def _call(self, name: str, p, *args):
        values = p.number_values()
        return getattr(self.lib, f"{self.prefix}_{name}")(
            (ctypes.c_int64 * len(values))(*values), *args)

    def _mask(self, allowed):
        return None if allowed is None else (ctypes.c_ubyte * self.count)(*map(int, allowed))

    def costs(self, p) -> np.ndarray:
        out = np.zeros(self.count)
        self._call("costs", p, out.ctypes.data_as(ctypes.c_void_p))
        return out

    def rank(self, p, allowed, k: int) -> list[int]:
        out = (ctypes.c_int * self.count)()
        return list(out[:self._call("rank", p, self._mask(allowed), k, out)])

    def best(self, p, allowed) -> int:
        return self._call("best", p, self._mask(allowed))


def expected(cost, allowed, safe, reference, depth: int, k: int) -> list[int]:
    """Every allowed candidate by its full cost (ties: catalogue order), the head guarded."""
    order = [int(i) for i in np.argsort(cost, kind="stable") if allowed is None or allowed[i]]
    kept = guarded_order(order, [safe[i] for i in order], depth,
                         [bool(reference[i]) for i in order])
    return kept[:k]


def masks(selector, p, rng) -> list:
    """The family rules' mask, every candidate (NULL), and random ones from sparse to dense."""
    n = len(selector.names)
    return [selector.allowed(p), None, *(rng.random(n) < q for q in (0.05, 0.2, 0.5, 0.9))]


def held_out(env) -> list[ConvProblem]:
    rows = env.data.part("holdout")[list(CONV_FIELDS)].drop_duplicates()
    return [ConvProblem.from_fields("conv2d_fwd", DTYPE, r) for r in rows.to_dict("records")]


def check(export: Export, selector, full_costs, shapes, seed: int) -> int:
    """Asserts costs, rank (several k) and best against the full costs on `shapes`, each with
    several `allowed` masks; how many shape and mask pairs were compared."""
    s, rng, compared = selector, np.random.default_rng(seed), 0
    reference = reference_flags([e.family for e in s.catalogue])
    for p in shapes:
        cost, safe = full_costs(p), s.safe(p)
        np.testing.assert_array_equal(export.costs(p), cost)
        for allowed in masks(s, p, rng):
            for k in (1, 2, 3, 7, len(s.names)):
                want = expected(cost, allowed, safe, reference, s.guard_depth, k)
                assert export.rank(p, allowed, k) == want, (p.label(), k)
            assert export.best(p, allowed) == (want[0] if want else -1), p.label()
            compared += 1
    return compared


def test_best_and_rank_are_the_full_costs_order_with_the_guard(fwd, tmp_path):
    """Random and held-out shapes, the rules' and random `allowed` masks, several k: the
    export as generated, with pruning, and its portable loops choose as the full costs."""
    shapes = problems("conv2d_fwd", 150, seed=31) + held_out(fwd)
    assert fwd.selector.guard_depth == 2 and len(shapes) > 150
    for options in ({}, {"prune": True}, {"portable": True}):
        export = Export(fwd.selector, fwd.files[MODEL], tmp_path, **options)
        assert check(export, fwd.selector, fwd.slow.costs, shapes, seed=4) == 6 * len(shapes)


def scaled(model_text: str, first: int, factor: float) -> str:
    """The model with the leaves of trees `first` on multiplied by `factor`."""
    out, tree = [], -1
    for line in model_text.splitlines():
        if line.startswith("Tree="):
            tree = int(line[5:])
        if line.startswith("leaf_value=") and tree >= first:
            line = "leaf_value=" + " ".join(repr(float(v) * factor) for v in line[11:].split())
        out.append(line)
    return "\n".join(out) + "\n"


def bounded_out(selector, model_text: str, shapes) -> int:
    """How many allowed candidates the bounds after the first block leave out of `best` (the
    lowest cost and the guard's head), summed over `shapes`: what prune() drops there."""
    s = selector
    table = instance_matrix(s.spec, s.catalogue)
    trees = parse_trees(model_text)
    sign = "" if s.kind == "regressor" else "-"
    low, high = _Forest(trees, _Columns(s.spec, table), len(s.catalogue), True).rest(sign)
    reference = reference_flags([e.family for e in s.catalogue])
    dropped = 0
    for p in shapes:
        allowed = np.array(s.allowed(p))
        plain = allowed & ~reference
        if plain.sum() < s.guard_depth:
            continue
        x = feature_matrix(s.spec, dict(zip(s.spec.inputs, p.number_values())), table)
        raw = sum(np.array([leaf_masks(t).leaf(row) for row in x]) for t in trees[:GROUP])
        part = -raw if sign else raw
        lowest, highest = part + low[:, 0], part + high[:, 0]
        limit = max(highest[allowed].min(), np.sort(highest[plain])[s.guard_depth - 1])
        dropped += int((lowest[allowed] > limit).sum())
    return dropped


def test_pruning_drops_candidates_yet_chooses_as_the_full_costs(fwd, tmp_path):
    """With the leaves after the first block made small, the bounds leave most candidates out
    after it: the pruned export sums few of them, and still chooses as the full costs."""
    text = scaled(fwd.files[MODEL], GROUP, 1e-3)
    assert all(leaf_masks(t) is not None for t in parse_trees(text)[:GROUP])
    shapes = problems("conv2d_fwd", 120, seed=32) + held_out(fwd)
    assert bounded_out(fwd.selector, text, shapes[:40]) > 3 * 40
    full = Export(fwd.selector, text, tmp_path)
    pruned = Export(fwd.selector, text, tmp_path, prune=True)
    assert check(pruned, fwd.selector, full.costs, shapes, seed=5) == 6 * len(shapes)


def exit_bits(selector, trees, p) -> np.ndarray:
    """Each candidate's exit leaf's bit in each masked tree on shape p (candidates x trees)."""
    s = selector
    x = feature_matrix(s.spec, dict(zip(s.spec.inputs, p.number_values())),
                       instance_matrix(s.spec, s.catalogue))
    masks = [t.mask(t.splits, lambda sp, row=row: row[sp.feature]) for row in x for t in trees]
    return np.array([m & -m for m in masks], dtype=np.uint64).reshape(len(x), len(trees))


def test_bounds_of_the_blocks_still_to_come_are_those_of_the_reachable_leaves(fwd):
    """prune()'s tables: on random and held-out shapes every candidate's exit leaf in every
    tree is one its fixed masks keep (so no sum leaves its bounds), and REST_LOW / REST_HIGH
    are, per candidate and block b, the sums over the trees from block b on of the lowest and
    highest leaf kept (negated, swapped, where the cost is the negated score)."""
    s, text = fwd.selector, fwd.files[MODEL]
    sign = "" if s.kind == "regressor" else "-"
    trees = [leaf_masks(t) for t in parse_trees(text)]
    assert all(t is not None for t in trees)  # no branchy tree: each block holds GROUP trees
    forest = _Forest(parse_trees(text), _Columns(s.spec, instance_matrix(s.spec, s.catalogue)),
                     len(s.catalogue), True)
    fixed = np.concatenate([np.array(block, dtype=np.uint64) for block in forest.fixed], axis=1)
    for p in problems("conv2d_fwd", 60, seed=33) + held_out(fwd):
        bits = exit_bits(s, trees, p)
        assert (bits & fixed == bits).all(), p.label()
    kept = [[[v for b, v in enumerate(t.leaves) if int(m) >> b & 1] for t, m in zip(trees, row)]
            for row in fixed]
    lowest = np.array([[min(leaves) for leaves in row] for row in kept])
    highest = np.array([[max(leaves) for leaves in row] for row in kept])
    low, high = forest.rest(sign)
    for b in range(1, len(forest.fixed)):
        rest = lowest[:, b * GROUP:].sum(axis=1), highest[:, b * GROUP:].sum(axis=1)
        want = (-rest[1], -rest[0]) if sign else rest
        np.testing.assert_allclose(low[:, b - 1], want[0], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(high[:, b - 1], want[1], rtol=1e-12, atol=1e-12)


def test_cascade_sums_the_rest_for_the_best_after_the_first_trees(fwd, tmp_path):
    """cascade (trees, keep): after the block that reaches `trees`, rank and best sum the
    remaining trees only for the max(k, keep) lowest partial costs and the guard's head; they
    order those by their full costs. Keeping every candidate is the full order."""
    s, text = fwd.selector, fwd.files[MODEL]
    sign = "" if s.kind == "regressor" else "-"
    reference = reference_flags([e.family for e in s.catalogue])
    trees = parse_trees(text)
    assert len(trees) > GROUP and all(leaf_masks(t) is not None for t in trees[:GROUP])
    shapes = problems("conv2d_fwd", 80, seed=34) + held_out(fwd)
    whole = Export(s, text, tmp_path, cascade=(GROUP, len(s.names)))
    assert check(whole, s, fwd.slow.costs, shapes, seed=6) == 6 * len(shapes)
    keep, cut, rng = 3, Export(s, text, tmp_path, cascade=(GROUP, 3)), np.random.default_rng(7)
    changed = 0
    for p in shapes:
        x = feature_matrix(s.spec, dict(zip(s.spec.inputs, p.number_values())),
                           instance_matrix(s.spec, s.catalogue))
        raw = sum(np.array([leaf_masks(t).leaf(row) for row in x]) for t in trees[:GROUP])
        part, cost, safe = (-raw if sign else raw), cut.costs(p), s.safe(p)
        for allowed in masks(s, p, rng):
            live = np.ones(len(s.names), bool) if allowed is None else np.array(allowed, bool)
            for k in (1, 2, 5):  # best is rank's first with k = 1
                kept = live.copy()
                if live.sum() > max(k, keep):
                    limit = np.sort(part[live])[max(k, keep) - 1]
                    plain = np.sort(part[live & ~reference])
                    head = plain[s.guard_depth - 1] if len(plain) >= s.guard_depth else -np.inf
                    kept = live & ((part <= limit) | (~reference & (part <= head)))
                want = expected(cost, kept, safe, reference, s.guard_depth, k)
                assert cut.rank(p, allowed, k) == want, (p.label(), k)
                changed += want != expected(cost, allowed, safe, reference, s.guard_depth, k)
                if k == 1:
                    assert cut.best(p, allowed) == (want[0] if want else -1), p.label()
    assert changed > 0  # keeping 3 after 8 trees does change some choices


def test_the_selectors_cascade_chooses_as_the_cascaded_export(fwd, tmp_path):
    """Selector.cascade_top (LightGBM's partial sums, the rules' applicability) answers as the
    C export generated with the same cascade ranks the applicable candidates."""
    s, slow = fwd.selector, fwd.slow
    keep = 3
    cut = Export(s, fwd.files[MODEL], tmp_path, cascade=(GROUP, keep))
    changed = 0
    for p in problems("conv2d_fwd", 60, seed=35) + held_out(fwd):
        allowed = s.allowed(p)
        for k in (1, 4):
            want = [s.names[i] for i in cut.rank(p, allowed, k)]
            assert slow.cascade_top(p, k, GROUP, keep) == want, (p.label(), k)
            changed += want != slow.top(p, k)
    assert changed > 0  # the cascade is not the full order here
