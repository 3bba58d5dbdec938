"""Active sampling: the shapes an operator's model should be taught next, where it is unsure or
was wrong.

From a pool of unmeasured shapes (the operator's coverage_shapes, or the shapes a user listed),
a batch takes
  - the nearest pool shape to each problem the model chose badly on (efficiency under
    `wrong_below` on its validation and held-out problems, worst first; nearest in log2(1 + v)
    of the numeric shape fields), up to half of the batch;
  - then, up to a quarter of the batch, pool shapes that a thinly measured family takes (one
    that ran ok on fewer than `thin` training problems, fewest first, taken in turn; never a
    reference-speed family): the model knows least about the families it has seen least;
  - then the pool shapes on which the model is least sure: the smallest gap between the costs
    of its two best applicable candidates.
The coordinator (farm/cluster/retrain.py) queues the batch as a job after it registers a model;
measuring it grows the data, which makes the next training due.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from farm.problems import Problem
from farm.select.data import THIN, Dataset, family_problems, geometries, geometry_fields
from farm.select.evaluate import ranked
from farm.select.export import bundle_files
from farm.select.guard import thin_families
from farm.select.selector import Selector
from farm.select.train import TrainedModel, usable
from kernels.registry import get_family, operator_spec


@dataclass(frozen=True)
class SamplingBatch:
    """The shapes to measure next and why each was picked ("wrong: <problem>" or "unsure")."""

    operator: str
    dtype: str
    problems: tuple[Problem, ...]
    reasons: tuple[str, ...]

    def fields(self) -> list[dict]:
        """The problems as shape-field mappings (a job spec's inline source)."""
        spec = operator_spec(self.operator)
        return [{f: getattr(p, f) for f in spec.fields} for p in self.problems]


def cost_gap(selector: Selector, problem: Problem) -> float:
    """The gap between the costs of the model's two best applicable candidates (infinite with
    fewer than two): small where the model cannot tell them apart."""
    cost = selector.costs(problem)
    allowed = np.array(selector.allowed(problem), dtype=bool)
    best = np.sort(cost[allowed])
    return float(best[1] - best[0]) if len(best) > 1 else float("inf")


def wrong_problems(model: TrainedModel, data: Dataset, below: float) -> list[tuple[float, dict]]:
    """(efficiency, shape fields) of the validation and held-out problems on which the model's
    choice was under `below`, worst first."""
    selector = Selector(bundle_files(model), "lightgbm")
    frame = usable(data.part("validation", "holdout"))
    if frame.empty:
        return []
    chosen = ranked(frame, selector.frame_costs(frame), selector.frame_safe(frame),
                    selector.guard_depth)
    chosen = chosen[chosen["rank"] == 0]
    fields = list(operator_spec(data.operator).fields)
    bad = chosen[chosen["eff"] < below].sort_values("eff", kind="stable")
    return [(float(r["eff"]), {f: r[f] for f in fields}) for r in bad.to_dict("records")]


def takes(family: str, operator: str, dtype: str, problem: Problem) -> bool:
    """Whether any of the family's instances of `operator` and `dtype` applies to `problem`."""
    found = get_family(family)
    return any(found.applicable(i, problem) is None for i in found.instances(operator, dtype))


def _log_fields(operator: str, shapes: Sequence[dict]) -> np.ndarray:
    fields = geometry_fields(operator)
    return np.log2(1.0 + np.array([[float(s[f]) for f in fields] for s in shapes]))


def plan_batch(model: TrainedModel, data: Dataset, count: int, pool_size: int = 2000,
               seed: int = 0, wrong_below: float = 0.9,
               shapes: Sequence[dict] | None = None, thin: int = THIN) -> SamplingBatch:
    """The next `count` shapes to measure for `model`'s operator (see the module docstring),
    from `shapes` if given, else from `pool_size` generated ones."""
    op = operator_spec(data.operator)
    measured = set(geometries(data.operator, data.frame.drop_duplicates("problem")))
    fields = geometry_fields(data.operator)
    pool = []
    for shape in (op.coverage_shapes(pool_size, seed) if shapes is None else shapes):
        p = op.problem(data.dtype, shape)
        if tuple(int(getattr(p, f)) for f in fields) not in measured:
            pool.append(p)
    if not pool:
        return SamplingBatch(data.operator, data.dtype, (), ())
    shapes = [{f: getattr(p, f) for f in fields} for p in pool]
    points = _log_fields(data.operator, shapes)
    picked: dict[int, str] = {}
    wrong = wrong_problems(model, data, wrong_below)[:count // 2]
    if wrong:
        targets = _log_fields(data.operator, [shape for _, shape in wrong])
        for (eff, shape), target in zip(wrong, targets):
            distance = np.abs(points - target).sum(axis=1)
            for i in np.argsort(distance, kind="stable"):
                if int(i) not in picked:
                    label = ",".join(f"{f}={shape[f]}" for f in fields)
                    picked[int(i)] = f"wrong ({eff:.2f}): {label}"
                    break
    _pick_thin(picked, pool, data, thin, len(picked) + count // 4)
    selector = Selector(bundle_files(model))
    gaps = [cost_gap(selector, p) for p in pool]
    for i in np.argsort(gaps, kind="stable"):
        if len(picked) >= count:
            break
        if int(i) not in picked and np.isfinite(gaps[i]):
            picked[int(i)] = f"unsure (gap {gaps[i]:.3g})"
    order = list(picked)
    return SamplingBatch(data.operator, data.dtype, tuple(pool[i] for i in order),
                         tuple(picked[i] for i in order))


def _pick_thin(picked: dict[int, str], pool: Sequence[Problem], data: Dataset, below: int,
               until: int) -> None:
    """Add to `picked` (pool index: reason), until it holds `until`, pool shapes of the thin
    families, one family after another (fewest training problems first), each its next shape
    in pool order."""
    def taken_by(family: str):
        return (i for i, p in enumerate(pool) if takes(family, data.operator, data.dtype, p))

    queues = [(family, ran, taken_by(family))
              for family, ran in thin_families(family_problems(data), below)]
    while queues and len(picked) < until:
        for entry in list(queues):
            if len(picked) >= until:
                break
            family, ran, shapes = entry
            found = next((i for i in shapes if i not in picked), None)
            if found is None:
                queues.remove(entry)
            else:
                picked[found] = f"thin: {family} ran on {ran} training problems"
