"""The model registry: every trained model is a `models` row (metrics, data window) with its
bundle as a `model_bundle` artifact. A new model is promoted only if it chooses at least as
well as the promoted one on the problems neither trained on (the new model's held-out problems
and its validation problems measured since the promoted one's data; both scored on the same
rows), and `retrain_due` says when an operator/arch/dtype's data has grown enough for a new
one."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightgbm as lgb

from farm.select.data import Dataset
from farm.select.evaluate import efficiency
from farm.select.export import bundle_files, bundle_key, pack, unpack, write_bundle
from farm.select.selector import Selector
from farm.select.train import TrainedModel, usable
from farm.store import Queries
from farm.store.models import utcnow
from farm.store.queries import ModelQueries, ModelSummary

RETRAIN_GROWTH = 0.2


@dataclass(frozen=True)
class Registration:
    """A stored model and the promotion decision."""

    model: ModelSummary
    promoted: bool
    reason: str


@dataclass(frozen=True)
class RetrainDecision:
    """Whether an operator/arch/dtype needs a new model, and why."""

    due: bool
    reason: str
    measurements: int
    at_last_model: int | None


def _comparison_rows(data: Dataset, incumbent: ModelSummary) -> tuple[Any, str]:
    """The rows both models are scored on: the held-out problems, and the validation problems
    first measured after the incumbent's data (neither model trained on either; shapes that
    active sampling or a new sweep added count, not only the held-out networks)."""
    import pandas as pd

    rows, basis = data.part("holdout"), "the same held-out rows"
    since = incumbent.data_window.get("last_id")
    if since is not None and "id" in data.frame:
        validation = data.part("validation")
        first = validation.groupby("problem")["id"].transform("min")
        fresh = validation[first > since]
        if len(fresh):
            rows = pd.concat([rows, fresh])
            basis += (f" and the {fresh['problem'].nunique()} validation problems measured "
                      f"since model {incumbent.id}")
    return usable(rows), basis


def _mean(files: dict[str, str], rows: Any) -> float:
    selector = Selector(files, "lightgbm")
    return efficiency(rows, selector.frame_costs(rows), selector.frame_safe(rows),
                      selector.guard_depth).mean


def _scores(queries: Queries, model: TrainedModel, incumbent: ModelSummary,
            data: Dataset | None) -> tuple[float, float, str]:
    """The new and the promoted model's mean efficiency on the same rows (_comparison_rows),
    or, with no data, their stored holdout figures."""
    if data is None:
        return (model.metrics["holdout"]["mean"],
                incumbent.metrics.get("holdout", {}).get("mean", math.nan), "its stored holdout")
    rows, basis = _comparison_rows(data, incumbent)
    new = _mean(bundle_files(model), rows)
    try:
        old = _mean(unpack(ModelQueries(queries).model_bundle(incumbent.id)), rows)
    except (ValueError, LookupError) as exc:  # a bundle this farm version cannot read
        return new, math.nan, f"unreadable ({exc})"
    return new, old, basis


def register(queries: Queries, model: TrainedModel, data: Dataset | None = None,
             tolerance: float = 0.0) -> Registration:
    """Store a model; promote it if it is not worse than the promoted one on the problems
    neither trained on (_comparison_rows)."""
    registry = ModelQueries(queries)
    bundle = pack(bundle_files(model))
    incumbent = registry.promoted_model(model.operator, model.arch, model.dtype)
    stored = registry.add_model(model.operator, model.arch, model.dtype, model.metrics,
                                model.data_window, bundle, bundle_key(bundle),
                                f"lightgbm {lgb.__version__}")
    if incumbent is None:
        promote, reason = True, "first model of its operator/arch/dtype"
    else:
        new, old, basis = _scores(queries, model, incumbent, data)
        if math.isnan(old):
            promote, reason = True, f"model {incumbent.id} cannot be scored: {basis}"
        elif math.isnan(new):
            promote, reason = False, "no held-out problems to compare on"
        else:
            promote = new >= old - tolerance
            reason = (f"mean efficiency {new:.4f} vs {old:.4f} of model {incumbent.id} on "
                      f"{basis}")
    if promote:
        registry.promote_model(stored.id)
    return Registration(registry.model(stored.id), promote, reason)


def retrain_due(queries: Queries, operator: str, arch: str, dtype: str,
                growth: float = RETRAIN_GROWTH, include_replay: bool = False,
                period_s: float | None = None) -> RetrainDecision:
    """Due when no model exists yet, when the measurements have grown by `growth` (20%) since
    the newest model's data window, or (with `period_s`) when that model is older than the
    period and measurements have been added since. The coordinator asks between jobs and on a
    timer while it measures."""
    registry = ModelQueries(queries)
    now = registry.measurement_count(operator, arch, dtype, include_replay)
    last = registry.latest_model(operator, arch, dtype)
    if last is None:
        return RetrainDecision(now > 0, "no model yet" if now else "no measurements", now, None)
    then = int(last.data_window.get("measurements", 0))
    due = now >= then * (1 + growth) and now > then
    reason = (f"{now} measurements, {then} at model {last.id}"
              f" ({'+' if now >= then else ''}{(now - then) / max(then, 1):.0%})")
    if not due and period_s is not None and now > then:
        created = last.created_at if last.created_at.tzinfo else last.created_at.replace(
            tzinfo=dt.timezone.utc)
        age = (utcnow() - created).total_seconds()
        due = age >= period_s
        reason += f", model {age:.0f} s old (period {period_s:g} s)"
    return RetrainDecision(due, reason, now, then)


def export_model(queries: Queries, model_id: int, out: str | Path,
                 cascade: tuple[int, int] | None = None) -> Path:
    """Write a stored model's bundle directory (core files, C export, README); `cascade`: the
    C export's (farm.select.cexport.c_source)."""
    registry = ModelQueries(queries)
    summary = registry.model(model_id)
    info: dict[str, Any] = {"id": summary.id, "version": summary.version,
                            "promoted": summary.promoted, "created_at": str(summary.created_at)}
    return write_bundle(out, unpack(registry.model_bundle(model_id)), info, cascade)
