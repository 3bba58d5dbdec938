"""The group-normalization families' rule key (farm/select/rulekeys.py)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from farm.select.rulekeys import RuleKey, above
from kernels.family import Instance


def _groupnorm_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """gn_onepass and gn_twopass (kernels/groupnorm/plan.py): layout, the grid and index
    limits, the residues against the vectors, and how many of the splits of H*W (or of its
    vectors) would leave a chunk empty."""
    from kernels.groupnorm.plan import MAX_GRID_YZ
    from kernels.groupnorm.problem import MAX_HW

    splits = sorted({i.settings.get("split_hw", 1) for i in instances})

    def key(p: Any) -> Hashable:
        hw = p.HW
        return (p.layout, hw > MAX_HW, p.N * p.G >= 2**31, p.Cg % 8, hw % 8,
                p.N > MAX_GRID_YZ, p.C * hw >= 2**31, p.C % 8,
                above(splits, hw), above(splits, hw // 2), above(splits, hw // 4),
                above(splits, hw // 8))
    return key


KEYS: dict[str, Callable[[Any, Sequence[Instance], str], RuleKey]] = {
    "gn_onepass": _groupnorm_key, "gn_twopass": _groupnorm_key,
}
