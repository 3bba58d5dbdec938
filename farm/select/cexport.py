"""The model as one dependency-free C file (C99 + libm) for a dispatcher to link.

It holds the candidate catalogue (names and instance columns), the feature formulas of
features.py translated to C expression by expression (same operations in the same order, so
the doubles are identical; compile with -ffp-contract=off so no multiply-add is fused), and the
LightGBM trees from the text model as leaf masks (trees.py), with LightGBM's missing-value rules
folded into each comparison. Each piece of work is done as rarely as it can be: the shape's sizes
once per call; the splits on device constants and instance columns at generation, as one mask
per tree and candidate; the splits on the shape once per tree and call; only the splits on the
interactions per candidate, without branches, in one loop over the candidates per tree that
the compiler vectorises (a split whose leaves the instance columns have cleared for every
candidate is left out; one whose leaves the shape has cleared keeps every leaf). Leaves are
added tree by tree in the model's order, so the costs are LightGBM's raw scores bit for bit. A
tree with more leaves than a mask holds is written as nested if/else code. The caller supplies
applicability (`allowed`, one byte per candidate, NULL for all): its kernels' launch rules
live with the dispatcher, as the descriptors' do in Python. `rank` and `best` apply the
guard of farm.select.guard: among the model's GUARD_DEPTH best allowed candidates, those of
no reference-speed family whose measured support holds the shape come first.

    int  P_count(void);  const char *P_name(int i);
    int  P_costs(const int64_t shape[F], double *cost);   lower is better, one per candidate
    int  P_best(const int64_t shape[F], const unsigned char *allowed);     -1 if none allowed
    int  P_rank(const int64_t shape[F], const unsigned char *allowed, int k, int *out);

`shape` holds the operator's shape fields in its record's order, as numbers (a field that
takes names: the index of its value among the record's choices); P_SHAPE_FIELDS names them.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Sequence

import numpy as np

from farm.select.catalogue import CatalogueEntry
from farm.select.features import INSTANCE, FeatureSpec, instance_matrix
from farm.select.guard import reference_flags, support_fields
from farm.select.trees import LeafMasks, Split, Tree, leaf_masks, nan_left, parse_trees

_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_HELPERS = ("cdiv", "fdiv", "vmin", "vmax")
GROUP = 8  # trees whose leaves are added in one pass over the candidates
LANES = 4  # candidate loops cover whole multiples of this, so that they vectorise without tails
_DEBRUIJN = 0x03F79D71B4CB0A89


def _double(value: float) -> str:
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "-INFINITY"
    return float(value).hex()


def c_expression(formula: str) -> str:
    """A feature formula as C, fully parenthesised (variables become v_NAME)."""
    def emit(node: ast.AST) -> str:
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return f"({emit(node.left)} {_OPS[type(node.op)]} {emit(node.right)})"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return f"(-{emit(node.operand)})"
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in _HELPERS:
            return f"{node.func.id}({', '.join(emit(a) for a in node.args)})"
        if isinstance(node, ast.Name):
            return f"v_{node.id}"
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return _double(float(node.value))
        raise ValueError(f"cannot translate {ast.dump(node)} of {formula!r} to C")
    return emit(ast.parse(formula, mode="eval").body)


def symbol_prefix(operator: str, arch: str, dtype: str) -> str:
    return re.sub(r"\W", "_", f"farm_select_{operator}_{arch}_{dtype}")


def _rows(values: Sequence[float], per_line: int = 6) -> str:
    items = [_double(v) if isinstance(v, float) else str(v) for v in values]
    return ",\n  ".join(", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line))


def header(prefix: str, inputs: Sequence[str]) -> str:
    """The C header; `inputs`: the shape fields, in the order `shape` holds them."""
    f, upper = len(inputs), prefix.upper()
    return (f"/* farm-select C export: {prefix} (generated; see the .c file) */\n"
            f"#ifndef {upper}_H\n#define {upper}_H\n#include <stdint.h>\n"
            f"#define {upper}_SHAPE_COUNT {f}\n"
            f"#define {upper}_SHAPE_FIELDS \"{' '.join(inputs)}\"\n"
            "#ifdef __cplusplus\nextern \"C\" {\n#endif\n"
            f"int {prefix}_count(void);\nconst char *{prefix}_name(int i);\n"
            f"int {prefix}_costs(const int64_t shape[{f}], double *cost);\n"
            f"int {prefix}_best(const int64_t shape[{f}], const unsigned char *allowed);\n"
            f"int {prefix}_rank(const int64_t shape[{f}], const unsigned char *allowed, int k, "
            "int *out);\n#ifdef __cplusplus\n}\n#endif\n#endif\n")


def _test(split: Split, value: str) -> str:
    """A split's test in C: !(v > t), which NaN passes, where NaN goes left; else v <= t."""
    t = _double(split.threshold)
    return f"!({value} > {t})" if split.nan_left else f"{value} <= {t}"


def _mask(value: int) -> str:
    return f"UINT64_C(0x{value & (2**64 - 1):x})"


def _names(formula: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(formula)) if isinstance(n, ast.Name)}


class _Columns:
    """Where the C code finds each feature column: the shape's values (v_NAME, once per call),
    values known at generation (device constants, instance columns of each candidate) and the
    interactions (X[j][c], per candidate and call). Records which ones the code reads."""

    def __init__(self, spec: FeatureSpec, table: np.ndarray) -> None:
        self.names, self.table = spec.names, table
        self.shape = len(spec.inputs) + len(spec.shape_formulas)
        self.constants = list(spec.constants().values())
        self.instance = self.shape + len(self.constants)
        self.interactions = self.instance + table.shape[1]
        self.stored: dict[int, int] = {}  # interaction column -> its row of X
        self.read: set[str] = set()  # shape values (v_NAME) the code reads

    def known(self, f: int) -> bool:
        return self.shape <= f < self.interactions

    def value(self, f: int, c: int) -> float:
        """A known column's value for candidate c."""
        if f < self.instance:
            return self.constants[f - self.shape]
        return float(self.table[c, f - self.instance])

    def expr(self, f: int) -> str:
        """A column's value in code that loops over the candidates (c)."""
        if f < self.instance:
            self.read.add(self.names[f])
            return f"v_{self.names[f]}"
        if f < self.interactions:
            return f"INST[{f - self.instance}][c]"
        return f"X[{self.stored.setdefault(f, len(self.stored))}][c]"


def _masked_tree(k: int, tree: LeafMasks, cols: _Columns, count: int, padded: int
                 ) -> tuple[str, list[str], list[int]]:
    """Tree k as a function of X and its shape mask; the lines of costs() that compute that
    mask and call it; its fixed mask per candidate (the splits on known values; padding keeps
    every leaf)."""
    known = [sp for sp in tree.splits if cols.known(sp.feature)]
    fixed = [tree.mask(known, lambda sp, c=c: cols.value(sp.feature, c)) for c in range(count)]
    fixed += [tree.full] * (padded - count)
    keeps, tests = [], []
    for sp in tree.splits:
        if sp.feature < cols.interactions or not any(f & sp.drop for f in fixed[:count]):
            continue  # decided before the loop, or no candidate keeps the leaves it clears
        i = len(keeps)
        keeps.append(f"  const uint64_t k{i} = s & {_mask(sp.drop)} ? {_mask(~sp.drop)} "
                     f": ~UINT64_C(0);")
        tests.append(f"KEEP({_test(sp, cols.expr(sp.feature))}, k{i})")
    loop = (f"  for (c = 0; c < NP; c++)\n    m[c] = s & FIXED[{k}][c]"
            + "".join(f"\n      & {t}" for t in tests) + ";")
    function = "\n".join([f"VECTOR_CLONES static void tree{k}(double X[NX][NP], uint64_t s, "
                          "uint64_t *m) {", "  int c;", *(() if tests else ("  (void)X;",)),
                          *keeps, loop, "}"])
    call = [f"  s = {_mask(tree.full)};"]
    call += [f"  s &= KEEP({_test(sp, cols.expr(sp.feature))}, {_mask(~sp.drop)});"
             for sp in tree.splits if sp.feature < cols.shape]
    return function, call, fixed


def _branches(t: Tree, n: int, cols: _Columns, indent: str) -> list[str]:
    if n < 0 or not t.feature:
        return [f"{indent}t += {_double(t.leaves[~n if n < 0 else 0])};"]
    split = Split(t.feature[n], t.threshold[n], nan_left(t, n), 0)
    return ([f"{indent}if ({_test(split, cols.expr(split.feature))}) {{"]
            + _branches(t, t.left[n], cols, indent + "  ") + [f"{indent}}} else {{"]
            + _branches(t, t.right[n], cols, indent + "  ") + [f"{indent}}}"])


def _branchy_tree(k: int, t: Tree, cols: _Columns) -> list[str]:
    """Tree k as nested if/else code per candidate (more leaves than a mask holds)."""
    return ([f"  for (c = 0; c < NC; c++) {{  /* tree {k} */", "    double t = 0.0;"]
            + _branches(t, 0, cols, "    ") + ["    cost[c] += t;", "  }"])


def _value_lines(spec: FeatureSpec, cols: _Columns) -> tuple[list[str], list[str]]:
    """The shape's values (once per call) and the interactions (per candidate, into X) that
    the trees read, with what they are computed from."""
    wanted = set(cols.read) | {cols.names[f] for f in cols.stored}
    for name, formula in reversed((*spec.shape_formulas, *spec.interactions)):
        if name in wanted:
            wanted |= _names(formula)
    shape = [f"  const double v_{f} = (double)shape[{i}];"
             for i, f in enumerate(spec.inputs) if f in wanted]
    shape += [f"  const double v_{n} = {_double(v)};" for n, v in spec.constants().items()
              if n in wanted]
    shape += [f"  const double v_{n} = {c_expression(f)};" for n, f in spec.shape_formulas
              if n in wanted]
    per = [f"    const double v_{n} = INST[{spec.instance.index(n)}][c];"
           for n in INSTANCE if n in wanted]
    per += [f"    const double v_{n} = {c_expression(f)};" for n, f in spec.interactions
            if n in wanted]
    per += [f"    X[{j}][c] = v_{cols.names[f]};" for f, j in cols.stored.items()]
    return shape, per


def _debruijn() -> list[int]:
    table = [0] * 64
    for i in range(64):
        table[((1 << i) * _DEBRUIJN & (2**64 - 1)) >> 58] = i
    return table


def _forest(trees: Sequence[Tree], cols: _Columns, count: int, padded: int
            ) -> tuple[list[str], list[str], list[list[int]], list[str]]:
    """The trees' functions, the lines of costs() that run them in order, the fixed masks
    (tree x candidate) and the leaf tables."""
    blocks, fixed, leaves, functions, group = [], [], [], [], []

    def flush() -> None:
        """Add the leaves of the trees in `group` to the costs, in tree order."""
        if group:
            blocks.extend(["  for (c = 0; c < NC; c++) {", "    double t = cost[c];"]
                          + [f"    t += LEAF{k}[LOWEST(M[{i}][c])];" for i, k in enumerate(group)]
                          + ["    cost[c] = t;", "  }"])
            group.clear()

    for k, t in enumerate(trees):
        masks = leaf_masks(t)
        if masks is None:
            flush()
            blocks += _branchy_tree(k, t, cols)
            fixed.append([0] * padded)
            continue
        function, lines, rows = _masked_tree(k, masks, cols, count, padded)
        functions.append(function)
        blocks += lines + [f"  tree{k}(X, s, M[{len(group)}]);"]
        group.append(k)
        if len(group) == GROUP:
            flush()
        fixed.append(rows)
        leaves.append(f"static const double LEAF{k}[{len(masks.leaves)}] = {{\n  "
                      f"{_rows(list(masks.leaves), 4)}}};")
    flush()
    return functions, blocks, fixed, leaves


def _tables(table: np.ndarray, padded: int, fixed: list[list[int]], leaves: list[str],
            code: Sequence[str]) -> str:
    """The instance columns (where `code` reads them) and the trees' masks and leaves."""
    out = []
    if any("INST[" in line for line in code):
        inst = np.vstack([table, np.repeat(table[-1:], padded - len(table), axis=0)])
        out.append("static const double INST[NI][NP] = {\n  " + ",\n  ".join(
            "{" + _rows([float(v) for v in col], 4) + "}" for col in inst.T) + "};")
    if leaves:
        out += ["/* per tree and candidate: the leaves kept by the splits on known values */",
                "static const uint64_t FIXED[NT][NP] = {\n  " + ",\n  ".join(
                    "{" + _rows([_mask(m) for m in row], 3) + "}" for row in fixed) + "};",
                "#if !defined(__GNUC__) && !defined(__clang__)",
                f"static const unsigned char DEBRUIJN[64] = {{\n  {_rows(_debruijn(), 16)}}};",
                "#endif", *leaves]
    return "\n".join(out)


SAFE_BODY = """  if (REFERENCE[c]) return 0;
  for (int f = 0; f < NF; f++) {
    const double v = (double)shape[SUPPORT_FIELD[f]];
    if (!(v >= SUPPORT_LOW[c * NF + f] && v <= SUPPORT_HIGH[c * NF + f])) return 0;
  }
  return 1;"""


def _guard_tables(catalogue: Sequence[CatalogueEntry], fields: Sequence[int]) -> str:
    """Per candidate: whether its family is reference-speed, and its support's bounds (all
    values where the entry has none)."""
    wide = [(-math.inf, math.inf)] * len(fields)
    low = [lo for e in catalogue for lo, _ in (e.support or wide)]
    high = [hi for e in catalogue for _, hi in (e.support or wide)]
    ref = [int(r) for r in reference_flags([e.family for e in catalogue])]
    nl = "\n  "
    return (f"static const unsigned char REFERENCE[NC] = {{{nl}{_rows(ref, 32)}}};\n"
            f"static const int SUPPORT_FIELD[NF] = {{{', '.join(map(str, fields))}}};\n"
            f"static const double SUPPORT_LOW[NC * NF] = {{{nl}{_rows(low, 4)}}};\n"
            f"static const double SUPPORT_HIGH[NC * NF] = {{{nl}{_rows(high, 4)}}};")


def c_source(spec: FeatureSpec, catalogue: Sequence[CatalogueEntry], model_text: str,
             kind: str, prefix: str, note: str = "", guard_depth: int = 0,
             text_fields: Sequence[str] = ()) -> str:
    """The C file of a model (see the module docstring for its interface); `text_fields`: the
    shape fields that take names (not part of a candidate's support)."""
    trees = parse_trees(model_text)
    table = instance_matrix(spec, catalogue)
    count = len(catalogue)
    padded = -(-count // LANES) * LANES
    cols = _Columns(spec, table)
    functions, blocks, fixed, leaves = _forest(trees, cols, count, padded)
    shape_lines, per_lines = _value_lines(spec, cols)
    names = ", ".join('"' + e.name.replace('"', "") + '"' for e in catalogue)
    fields = support_fields(spec.inputs, text_fields)
    safe_body = "  return 1;" if not fields else SAFE_BODY
    sign = "" if kind == "regressor" else "-"
    return f"""/* farm-select C export (generated; do not edit). {prefix}
 * {note}
 * Model: LightGBM {kind}, {len(trees)} trees, {len(spec.names)} features (version {spec.version}),
 * {count} candidates. Build: cc -std=c99 -O2 -ffp-contract=off -c this.c (link -lm). */
#include <math.h>
#include <stdint.h>

#define NC {count}
#define NP {padded}  /* candidates rounded up to whole vector loops (padding repeats the last) */
#define NT {len(trees)}
#define NI {len(spec.instance)}
#define NX {max(len(cols.stored), 1)}
#define GROUP {GROUP}  /* trees whose leaves are added in one pass over the candidates */
#define NF {max(len(fields), 1)}  /* the shape fields a candidate's support bounds */
#define GUARD_DEPTH {guard_depth if guard_depth > 1 else 0}  /* the best this many: safe first */
#define REFERENCE_OF(c) {"REFERENCE[c]" if fields else "0"}
/* all ones where the test passes, else the mask that clears the left subtree's leaves */
#define KEEP(test, keep) ((test) ? ~UINT64_C(0) : (keep))
/* x86-64 with glibc: AVX2 copies of the tree loops beside the portable ones, the one to run
 * chosen when the library loads (values unchanged) */
#ifdef __has_attribute
#if __has_attribute(target_clones) && defined(__x86_64__) && defined(__GLIBC__) \\
    && !defined(__AVX2__)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef VECTOR_CLONES
#define VECTOR_CLONES
#endif
/* the index of the lowest set bit: the exit leaf */
#if defined(__GNUC__) || defined(__clang__)
#define LOWEST(m) __builtin_ctzll(m)
#else
#define LOWEST(m) DEBRUIJN[(((m) & (UINT64_C(0) - (m))) * {_mask(_DEBRUIJN)}) >> 58]
#endif

static const char *const NAMES[NC] = {{{names}}};
{_tables(table, padded, fixed, leaves, (*per_lines, *blocks))}
{_guard_tables(catalogue, fields) if fields else ""}

#if defined(__GNUC__) || defined(__clang__)
#define MAYBE_UNUSED __attribute__((unused))  /* a small model may not need every helper */
#else
#define MAYBE_UNUSED
#endif
static MAYBE_UNUSED double cdiv(double a, double b) {{ return ceil(a / b); }}
static MAYBE_UNUSED double fdiv(double a, double b) {{ return floor(a / b); }}
/* NaN if either is (a NaN, or b when only b is); without branches, so that loops vectorise */
static MAYBE_UNUSED double vmin(double a, double b) {{ return (a < b) | (a != a) ? a : b; }}
static MAYBE_UNUSED double vmax(double a, double b) {{ return (a > b) | (a != a) ? a : b; }}

{chr(10).join(functions)}

int {prefix}_count(void) {{ return NC; }}
const char *{prefix}_name(int i) {{ return i >= 0 && i < NC ? NAMES[i] : 0; }}

int {prefix}_costs(const int64_t shape[{len(spec.inputs)}], double *cost) {{
{chr(10).join(shape_lines)}
  {"double X[NX][NP];" if cols.stored or leaves else ""}
  {"uint64_t s, M[GROUP][NP];" if leaves else ""}
  int c;
  (void)shape;
  for (c = 0; c < NP; c++) {{
{chr(10).join(per_lines)}
  }}
  for (c = 0; c < NC; c++) cost[c] = 0.0;
{chr(10).join(blocks)}
  for (c = 0; c < NC; c++) cost[c] = {sign}cost[c];
  return NC;
}}

/* whether candidate c's family is not reference-speed and its support holds the shape */
static int safe(const int64_t *shape, int c) {{
{safe_body}
}}

int {prefix}_rank(const int64_t shape[{len(spec.inputs)}], const unsigned char *allowed, int k,
          int *out) {{
  double cost[NC];
  unsigned char taken[NC];
  int order[NC];
  int found = 0, plain = 0, head = 0;
  for (int c = 0; c < NC; c++) taken[c] = allowed && !allowed[c];
  {prefix}_costs(shape, cost);
  /* best first, until k are found and the guard's head is whole: up to and including the
     GUARD_DEPTH-th candidate of a family that is not reference-speed */
  for (; found < NC && (found < k || (GUARD_DEPTH > 1 && plain < GUARD_DEPTH)); found++) {{
    int best = -1;
    for (int c = 0; c < NC; c++)
      if (!taken[c] && (best < 0 || cost[c] < cost[best])) best = c;
    if (best < 0) break;
    taken[best] = 1;
    order[found] = best;
    if (plain < GUARD_DEPTH) {{
      head = found + 1;
      plain += !REFERENCE_OF(best);
    }}
  }}
  if (GUARD_DEPTH > 1 && head > 1) {{
    /* the head: safe ones, then other families' unsafe ones, then reference families', each
       in the model's order */
    int sorted_head[NC], n = 0;
    for (int level = 0; level < 3; level++)
      for (int i = 0; i < head; i++) {{
        const int c = order[i];
        const int l = safe(shape, c) ? 0 : REFERENCE_OF(c) ? 2 : 1;
        if (l == level) sorted_head[n++] = c;
      }}
    for (int i = 0; i < head; i++) order[i] = sorted_head[i];
  }}
  if (found > k) found = k;
  for (int i = 0; i < found; i++) out[i] = order[i];
  return found;
}}

int {prefix}_best(const int64_t shape[{len(spec.inputs)}], const unsigned char *allowed) {{
  int best = -1;
  return {prefix}_rank(shape, allowed, 1, &best) ? best : -1;
}}
"""
