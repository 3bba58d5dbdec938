"""The runtime selector: load a bundle, answer a shape (or a batch) with the instance to launch.

Costs come from the bundle's C export, compiled once per content with the system C compiler
and called through ctypes (microseconds), or from LightGBM's predict where no compiler exists
(hundreds of microseconds). Candidates are then taken best first, each checked against its
family's applicability rules, so an instance that cannot serve the shape is never chosen
(checking lazily gives the same answer as filtering first, at a fraction of the cost: the
cheapest candidate alone is checked before any sorting, and it is most often the answer).
The rules are asked in bulk first (farm.select.rulekeys): each family's rule key reduces a shape
to what its rules read, and the rules' answer for the family's candidates is kept per key, so a
shape costs its keys and a lookup. Where that answer is exact for every candidate (every family
has a key), the C export costs the allowed candidates only and ranks them itself (its `rank`:
the same order and guard); else it costs those a necessary condition leaves (the rules' answer
where known, the compiled case of the shape otherwise: `compiled_case`) and the rest are
checked one at a time as before.
The guard (farm.select.guard) then puts a safe candidate first among the model's `depth` best:
no reference-speed family and no shape far outside a candidate's measured support where a
safer one is predicted close.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import platformdirs

from farm.problems import Problem, ProblemError
from farm.select.cexport import symbol_prefix
from farm.select.export import C_FILE, MODEL, c_files, parse, read_bundle
from farm.select.features import feature_matrix, instance_matrix, shape_numbers
from farm.select.guard import guarded_order, reference_flags, safe_rows, support_fields
from farm.select.rulekeys import RuleMask, RuleMasks
from farm.select.train import cost_of
from kernels.registry import get_family, operator_spec

BACKENDS = ("auto", "c", "lightgbm")


class SelectionError(ValueError):
    """A question the model cannot answer: another operator, architecture or dtype, or a shape
    no candidate can run."""


def compile_shared(source: str, folder: Path | None = None) -> Path | None:
    """The C export as a shared library (built once per content); None without a compiler."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    folder = Path(folder or os.environ.get("FARM_SELECT_CACHE")
                  or Path(platformdirs.user_cache_dir("kernel-farm")) / "select")
    folder.mkdir(parents=True, exist_ok=True)
    lib = folder / f"{hashlib.sha256(source.encode()).hexdigest()[:32]}.so"
    if lib.is_file():
        return lib
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        src, out = Path(tmp) / "model.c", Path(tmp) / "model.so"
        src.write_text(source)
        done = subprocess.run([cc, "-std=c99", "-O2", "-ffp-contract=off", "-shared", "-fPIC",
                               "-o", str(out), str(src), "-lm"], capture_output=True, text=True)
        if done.returncode != 0:
            return None
        out.replace(lib)
    return lib


class Selector:
    """Chooses among a bundle's candidates for one operator, architecture and dtype. Its C
    buffers serve one call at a time: give each thread its own Selector."""

    def __init__(self, files: dict[str, str], backend: str = "auto") -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}")
        self.spec, self.catalogue, self.info = parse(files)
        self.operator, self.arch, self.dtype = (self.info["operator"], self.info["arch"],
                                                self.info["dtype"])
        self.kind = self.info["kind"]
        self.names = [e.name for e in self.catalogue]
        self.index = {n: i for i, n in enumerate(self.names)}
        self._instances = [e.instance() for e in self.catalogue]
        self._families = [get_family(e.family) for e in self.catalogue]
        self._record = operator_spec(self.operator).problem_type
        self._known = frozenset((*self._record.FIELDS, "layout"))
        self._rules: list[Callable[[Problem], str | None]] = [
            partial(f.applicable, i) for f, i in zip(self._families, self._instances)]
        self._table = instance_matrix(self.spec, self.catalogue)
        self._fields = support_fields(self.spec.inputs, tuple(self._record.TEXT_FIELDS))
        wide = [(-np.inf, np.inf)] * len(self._fields)
        bounds = np.array([e.support or wide for e in self.catalogue], np.float64)
        self._low, self._high = bounds[:, :, 0], bounds[:, :, 1]
        self._reference = reference_flags([e.family for e in self.catalogue])
        # per candidate, for checking one at a time: None (never safe) or its bounds by field
        self._bounds = [None if r else tuple(zip(self._fields, lo.tolist(), hi.tolist()))
                        for r, lo, hi in zip(self._reference, self._low, self._high)]
        self.guard_depth = int(self.info.get("train_config", {}).get("guard_depth", 0))
        self._booster = lgb.Booster(model_str=files[MODEL])
        # the candidates each shape allows, by the families' rule keys
        self._masks = RuleMasks(self._instances, self.operator)
        self._costs_c = self._costs_of_c = self._rank_c = None
        if backend != "lightgbm":
            self._costs_c = self._load_c(files.get(C_FILE) or c_files(files)[C_FILE])
            if self._costs_c is None and backend == "c":
                raise RuntimeError("no C compiler here to build the bundle's C export")
        self.backend = "c" if self._costs_c is not None else "lightgbm"

    @classmethod
    def load(cls, path: str | Path, backend: str = "auto") -> Selector:
        """A Selector for the bundle directory `path` (farm models export)."""
        return cls(read_bundle(path), backend)

    def _load_c(self, source: str) -> Callable[[Problem], np.ndarray] | None:
        """The export's costs of a problem, into one buffer that each call overwrites."""
        lib_path = compile_shared(source)
        if lib_path is None:
            return None
        self._lib = ctypes.CDLL(str(lib_path))
        costs = getattr(self._lib, symbol_prefix(self.operator, self.arch, self.dtype) + "_costs")
        costs.argtypes, costs.restype = [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int
        inputs = len(self.spec.inputs)
        shape = (ctypes.c_int64 * inputs)()
        cost = np.zeros(len(self.catalogue), dtype=np.float64)
        pack = struct.Struct(f"{inputs}q").pack_into
        shape_ptr = ctypes.c_void_p(ctypes.addressof(shape))
        cost_ptr = ctypes.c_void_p(cost.ctypes.data)

        def run(problem: Problem) -> np.ndarray:
            pack(shape, 0, *problem.number_values())
            costs(shape_ptr, cost_ptr)
            return cost

        # the allowed candidates only (an export older than costs_of has none)
        costs_of = getattr(self._lib, symbol_prefix(self.operator, self.arch, self.dtype)
                           + "_costs_of", None)
        if costs_of is not None:
            costs_of.argtypes = [ctypes.c_void_p] * 3
            costs_of.restype = ctypes.c_int

            def run_of(problem: Problem, allowed: RuleMask) -> np.ndarray:
                pack(shape, 0, *problem.number_values())
                costs_of(shape_ptr, allowed.address, cost_ptr)
                return cost
            self._costs_of_c = run_of

        # the allowed candidates ranked, guard included, and the first of them (best: one
        # value back); an export older than rank has neither
        prefix = symbol_prefix(self.operator, self.arch, self.dtype)
        rank, best = (getattr(self._lib, prefix + "_rank", None),
                      getattr(self._lib, prefix + "_best", None))
        if rank is not None and best is not None:
            rank.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
            best.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            rank.restype = best.restype = ctypes.c_int
            chosen = (ctypes.c_int * len(self.catalogue))()
            chosen_ptr = ctypes.c_void_p(ctypes.addressof(chosen))

            def run_rank(problem: Problem, allowed: RuleMask, k: int) -> list[int]:
                pack(shape, 0, *problem.number_values())
                if k == 1:
                    first = best(shape_ptr, allowed.address)
                    return [first] if first >= 0 else []
                return chosen[:rank(shape_ptr, allowed.address, k, chosen_ptr)]
            self._rank_c = run_rank
        return run

    # Questions ---------------------------------------------------------------------------
    def problem(self, problem: Problem | Mapping[str, Any], arch: str | None = None
                ) -> Problem:
        """The problem as its operator's record, refusing what this model never saw."""
        if arch is not None and arch != self.arch:
            raise SelectionError(f"this model chooses for {self.arch}; it never saw {arch} "
                                 f"(train or export a model for {arch})")
        if not isinstance(problem, Problem):
            if not self._known.issuperset(problem):
                unknown = [f for f in problem if f not in self._known]
                raise SelectionError(f"unknown field(s) {', '.join(unknown)}; {self.operator} "
                                     f"fields are {', '.join(self._record.FIELDS)}")
            try:
                problem = self._record.from_fields(self.operator, self.dtype, problem)
            except ProblemError as exc:
                raise SelectionError(str(exc)) from exc
        if problem.op != self.operator or problem.dtype != self.dtype:
            raise SelectionError(
                f"this model chooses {self.operator} {self.dtype} kernels; it never saw "
                f"{problem.op} {problem.dtype}")
        return problem

    def costs(self, problem: Problem) -> np.ndarray:
        """Each candidate's cost (lower is better), applicable or not, in catalogue order."""
        return self._costs(problem).copy()

    def _costs(self, problem: Problem) -> np.ndarray:
        """costs(), from the C export into its buffer (valid until the next call)."""
        if self._costs_c is not None:
            return self._costs_c(problem)
        return self._costs_batch([problem])[0]

    def _choice_costs(self, problem: Problem, allowed: RuleMask) -> np.ndarray:
        """The costs the choice needs: those of the candidates `allowed` leaves where the C
        export can skip the others (+inf for them), every candidate's otherwise."""
        if self._costs_of_c is not None:
            return self._costs_of_c(problem, allowed)
        return self._costs(problem)

    def _costs_batch(self, problems: Sequence[Problem], trees: int | None = None) -> np.ndarray:
        """LightGBM's costs of every candidate for each problem (of the first `trees` trees
        only, if given)."""
        count = len(self.catalogue)
        values = np.array([p.number_values() for p in problems], np.float64)
        shapes = {f: np.repeat(values[:, i], count) for i, f in enumerate(self.spec.inputs)}
        x = feature_matrix(self.spec, shapes, np.tile(self._table, (len(problems), 1)))
        raw = self._booster.predict(x, raw_score=True, num_iteration=trees)
        return cost_of(self.kind, raw).reshape(len(problems), count)

    def safe(self, problem: Problem) -> np.ndarray:
        """Whether each candidate is safe on `problem` (catalogue order; farm.select.guard)."""
        values = np.array(problem.number_values(), np.float64)[self._fields]
        everyone = np.arange(len(self.catalogue))
        return safe_rows(np.broadcast_to(values, (len(everyone), len(values))), everyone,
                         self._low, self._high, self._reference)

    def _safe_one(self, values: Sequence[float], i: int) -> bool:
        """Whether candidate i is safe on a shape (its number_values)."""
        bounds = self._bounds[i]
        if bounds is None:
            return False
        for f, lo, hi in bounds:
            if not lo <= values[f] <= hi:
                return False
        return True

    def _ranked(self, problem: Problem, cost: np.ndarray, k: int,
                allowed: RuleMask | None = None) -> list[str]:
        """The k best applicable candidates, best first (ties: catalogue order), guarded;
        `allowed`: the rules' mask, where known (its exact candidates are not asked again)."""
        depth = self.guard_depth if self.guard_depth > 1 else 0
        rules = self._rules
        if allowed is not None:
            mask, unsure = allowed.mask, self._masks.unsure

            def ok(i: int) -> bool:
                return bool(mask[i]) and (not unsure[i] or rules[i](problem) is None)
        else:
            def ok(i: int) -> bool:
                return rules[i](problem) is None
        first = int(cost.argmin()) if k == 1 else -1  # the stable sort's first
        if first >= 0 and ok(first) and (
                not depth or self._safe_one(problem.number_values(), first)):
            return [self.names[first]]
        order: list[int] = []
        plain = 0  # candidates of families that are not reference-speed, in the guard's head
        for i in np.argsort(cost, kind="stable"):
            if ok(i):
                order.append(int(i))
                plain += not self._reference[i]
                if len(order) >= k and plain >= depth:
                    break
        if not order:
            raise SelectionError(f"no candidate instance can run {problem.label()}")
        if depth:
            values = problem.number_values()
            order = guarded_order(order, [self._safe_one(values, i) for i in order], depth,
                                  [bool(self._reference[i]) for i in order])
        return [self.names[i] for i in order[:k]]

    def _choose(self, problem: Problem, k: int) -> list[str]:
        """The k best applicable candidates of a checked problem: ranked by the C export where
        the rules' mask is exact, else checked lazily."""
        allowed = self._masks(problem)
        if allowed.exact and self._rank_c is not None and k >= 1:
            chosen = self._rank_c(problem, allowed, k)
            if not chosen:
                raise SelectionError(f"no candidate instance can run {problem.label()}")
            return [self.names[i] for i in chosen]
        return self._ranked(problem, self._choice_costs(problem, allowed), k, allowed)

    def cascade_top(self, problem: Problem, k: int, trees: int, keep: int) -> list[str]:
        """top() as the C export generated with cascade=(trees, keep) answers it: after the
        block of trees that reaches `trees`, only the applicable candidates whose partial cost
        is among the max(k, keep) lowest, and the guard's head (the guard_depth lowest of
        families that are not reference-speed), go on; those are ranked by their full costs.
        From LightGBM's partial sums, to judge a cascade without compiling it."""
        from farm.select.cexport import GROUP

        total = self._booster.num_trees()
        cut = min(total, -(-trees // GROUP) * GROUP)
        full, part = self._costs_batch([problem])[0], self._costs_batch([problem], cut)[0]
        live = np.array(self.allowed(problem), bool)
        kept = live.copy()
        if cut < total and live.sum() > max(k, keep):
            limit = np.sort(part[live])[max(k, keep) - 1]
            plain = np.sort(part[live & ~self._reference])
            depth = self.guard_depth
            head = plain[depth - 1] if depth > 1 and len(plain) >= depth else -np.inf
            kept = live & ((part <= limit) | (~self._reference & (part <= head)))
        return self._ranked(problem, np.where(kept, full, np.inf), k)

    def allowed(self, problem: Problem) -> list[bool]:
        """Whether each candidate's family rules let it run `problem` (catalogue order)."""
        return [rule(problem) is None for rule in self._rules]

    def top(self, problem: Problem | Mapping[str, Any], k: int,
            arch: str | None = None) -> list[str]:
        """The model's k best applicable instances, best first (measure them at run time)."""
        return self._choose(self.problem(problem, arch), k)

    def select(self, problem: Problem | Mapping[str, Any], arch: str | None = None) -> str:
        """The instance to launch for one shape."""
        return self._choose(self.problem(problem, arch), 1)[0]

    def select_many(self, problems: Sequence[Problem | Mapping[str, Any]],
                    arch: str | None = None) -> list[str]:
        """The instance for each shape of a batch."""
        checked = [self.problem(p, arch) for p in problems]
        if self._costs_c is not None:
            return [self._choose(p, 1)[0] for p in checked]
        costs = self._costs_batch(checked) if checked else []
        return [self._ranked(p, c, 1, self._masks(p))[0] for p, c in zip(checked, costs)]

    def frame_safe(self, frame: Any) -> np.ndarray:
        """Whether each of a frame's pairs (shape fields and `kernel` per row) is safe for this
        model (farm.select.guard); an instance it does not know is not."""
        known = frame["kernel"].map(self.index)
        rows = known.notna().to_numpy()
        out = np.zeros(len(frame), dtype=bool)
        if rows.any():
            names = [self.spec.inputs[i] for i in self._fields]
            values = frame.loc[rows, names].to_numpy(np.float64)
            out[rows] = safe_rows(values, known[rows].astype(int).to_numpy(), self._low,
                                  self._high, self._reference)
        return out

    def frame_costs(self, frame: Any) -> np.ndarray:
        """Costs of a frame's pairs (shape fields and `kernel` per row); NaN for an instance
        this model does not know. Used to compare models on the same held-out rows."""
        known = frame["kernel"].map(self.index)
        rows = known.notna().to_numpy()
        out = np.full(len(frame), np.nan)
        if rows.any():
            shapes = {f: v[rows] for f, v in shape_numbers(self.operator, frame).items()}
            table = self._table[known[rows].astype(int).to_numpy()]
            raw = self._booster.predict(feature_matrix(self.spec, shapes, table),
                                        raw_score=True)
            out[rows] = cost_of(self.kind, raw)
        return out
