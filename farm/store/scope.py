"""The ok timings of one operator, dtype and architecture, read in one scan and ranked in
memory: the oracle per shape, each instance's rank and wins, and the vendor's time all come
from the same rows, so a results page pays for one pass over them instead of one per question.

Per (problem, environment), over the non-vendor kernels: oracle time = the fastest ok time;
efficiency = oracle time / time of an instance; rank = 1 + the number of strictly faster
instances.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

VENDOR = "vendor"  # the family of the vendor-library baseline rows
PAIR = ["problem_id", "environment_id"]


@dataclass(frozen=True)
class ScopeTimings:
    """timings: problem_id, environment_id, kernel_id, median_us (ok rows only);
    kernels: id, name, key, family; problems: problem_id, problem_key, the shape fields,
    flops, min_bytes; environments: environment_id, gpu_name, replay_of."""

    timings: pd.DataFrame
    kernels: pd.DataFrame
    problems: pd.DataFrame
    environments: pd.DataFrame

    @cached_property
    def ranked(self) -> pd.DataFrame:
        """Non-vendor timings with the kernel's name, key and family, the pair's oracle time
        and instance count, and the rank."""
        kernels = self.kernels.rename(columns={"id": "kernel_id", "name": "kernel",
                                               "key": "kernel_key"})
        ours = self.timings.merge(kernels[kernels["family"] != VENDOR], on="kernel_id")
        times = ours.groupby(PAIR, sort=False)["median_us"]
        return ours.assign(oracle_us=times.transform("min"), instances=times.transform("size"),
                           rank=times.rank(method="min").astype(np.int64))

    def per_shape(self) -> pd.DataFrame:
        """Per (problem, environment): the fastest instance (the oracle; ties to the first
        name), how many instances ran, the vendor's time where measured, the shape and the
        environment."""
        ranked = self.ranked
        best = (ranked[ranked["rank"] == 1].sort_values(PAIR + ["kernel"])
                .drop_duplicates(PAIR)
                .rename(columns={"kernel": "best_kernel", "family": "best_family"}))
        vendor_ids = self.kernels.loc[self.kernels["family"] == VENDOR, "id"]
        vendor = (self.timings[self.timings["kernel_id"].isin(vendor_ids)]
                  .groupby(PAIR, as_index=False)["median_us"].min()
                  .rename(columns={"median_us": "vendor_us"}))
        out = (best[PAIR + ["best_kernel", "best_family", "oracle_us", "instances"]]
               .merge(vendor, on=PAIR, how="left")
               .merge(self.problems, on="problem_id")
               .merge(self.environments, on="environment_id"))
        return out.sort_values(PAIR, ignore_index=True)

    def instance_stats(self) -> pd.DataFrame:
        """Per instance: shapes it ran on, summed efficiency over them, and wins (fastest)."""
        ranked = self.ranked
        ranked = ranked.assign(efficiency=ranked["oracle_us"] / ranked["median_us"],
                               wins=(ranked["rank"] == 1).astype(np.int64))
        return (ranked.groupby(["kernel", "family"], as_index=False)
                .agg(shapes=("median_us", "size"), efficiency_sum=("efficiency", "sum"),
                     wins=("wins", "sum")))

    def timings_of(self, kernels: tuple[str, ...]) -> pd.DataFrame:
        """The ok timings of these instances (by name or kernel key), each with its rank among
        the non-vendor instances of its (problem, environment)."""
        ranked = self.ranked
        ranked = ranked[ranked["kernel"].isin(kernels) | ranked["kernel_key"].isin(kernels)]
        keys = self.problems[["problem_id", "problem_key"]]
        return ranked.merge(keys, on="problem_id")[
            PAIR + ["problem_key", "kernel", "kernel_key", "median_us", "rank"]].reset_index(
                drop=True)


__all__ = ["VENDOR", "ScopeTimings"]
