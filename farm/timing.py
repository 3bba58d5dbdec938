"""The timing policy: how a pair is warmed up, repeated and checked. Stored with every row."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TimingPolicy(BaseModel):
    """How measure() times one instance on one problem; a spec's `timing:` overrides fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    warmup: int = Field(1, ge=0, le=1000,
                        description="untimed launches before timing, after the verified one")
    min_repeats: int = Field(10, ge=1, le=100_000, description="timed launches at least")
    max_repeats: int = Field(200, ge=1, le=100_000, description="timed launches at most")
    budget_ms: float = Field(200.0, gt=0, description="wall-clock budget per pair")
    target_ci: float = Field(0.005, gt=0, le=1.0,
                             description="stop once the median's 95% confidence interval is "
                                         "narrower than this, relative, on each side")
    flush_l2: bool = Field(True, description="start each timed launch with a cold L2 cache")
    flush_method: Literal["rotate", "memset"] = Field(
        "rotate", description="rotate: each timed launch works on the next of enough copies of "
                              "the problem's tensors that the launches since its last use have "
                              "moved flush_factor L2 sizes through the cache (a memset where that "
                              "takes more than 16 copies); memset: overwrite the L2 before each "
                              "timed launch")
    flush_factor: float = Field(1.0, ge=1.0, le=8.0,
                                description="bytes that evict the L2, in L2 sizes")
    stop_slower_than: float | None = Field(
        1.3, gt=1.0, description="stop timing an instance at its first check once its median is "
                                 "this many times the fastest measured on the problem so far "
                                 "(its rank is clear); null: always time to the target")
    far_slower_than: float | None = Field(
        2.0, gt=1.0, description="stop timing an instance already at an early check, after "
                                 "early_look timed launches, once its median is this many times "
                                 "the fastest on the problem so far; null: no early check")
    early_look: int = Field(3, ge=1, le=100_000,
                            description="timed launches before the early check")
    timeout_s: float = Field(10.0, gt=0, description="a launch running longer is a timeout")

    def model_post_init(self, _context) -> None:
        if self.max_repeats < self.min_repeats:
            raise ValueError(f"max_repeats={self.max_repeats} is below "
                             f"min_repeats={self.min_repeats}")
