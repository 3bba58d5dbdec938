"""The model as one dependency-free C file (C99 + libm) for a dispatcher to link.

It holds the candidate catalogue (names and instance columns), the feature formulas of
features.py translated to C expression by expression (same operations in the same order, so the
doubles are identical; compile with -ffp-contract=off so no multiply-add is fused), and the
LightGBM trees from the text model as leaf masks (trees.py), with LightGBM's missing-value rules
folded into each comparison. Each piece of work is done as rarely as it can be: the shape's
sizes once per call; the splits on device constants and instance columns at generation, as one
mask per tree and candidate; the splits on the shape once per tree and call; only the
interactions and their splits per class of the evaluated candidates (candidates whose instance
columns that the interactions read are equal have the same interactions on every shape: CLASS,
from the catalogue), without branches, in loops that the compiler vectorises, GROUP trees in one
pass (a block; a split whose leaves the instance columns have cleared for every candidate is
left out). On x86-64 with GCC or clang each block also has an AVX-512 copy, run where the
processor has AVX-512F and CD (wide*(): the distinct comparisons once per vector of classes,
masked ANDs, the exit leaves of eight candidates found and added as vectors). Leaves are added
tree by tree in the model's order, so the costs are LightGBM's raw scores bit for bit. A tree
with more leaves than a mask holds is written as nested if/else code. The caller supplies
applicability (`allowed`, one byte per candidate, NULL for all): its kernels' launch rules live
with the dispatcher, as the descriptors' do in Python. `costs` evaluates every candidate; `rank`
and `best` only the allowed ones, gathered into a list (padded to whole vectors), and apply the
guard of farm.select.guard: among the model's GUARD_DEPTH best allowed candidates, those of no
reference-speed family whose measured support holds the shape come first. Generated with
`prune`, they also drop between blocks the candidates that the bounds of their remaining leaves
show cannot be needed (exact, see prune(); on the models measured the bounds are too wide to pay
for the check, so it is off by default). Generated with `cascade` (trees, keep), they sum the
trees after the first `trees` only for the `keep` best so far (see cascade(): faster, not exact,
off by default).

    int  P_count(void);  const char *P_name(int i);
    int  P_costs(const int64_t shape[F], double *cost);   lower is better, one per candidate
    int  P_costs_of(const int64_t shape[F], const unsigned char *allowed, double *cost);
                                     the allowed candidates' costs, HUGE_VAL for the others
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
GROUP = 16  # trees whose leaves are added in one pass over the candidates
LANES = 8  # candidate loops cover whole multiples of this, so that they vectorise without tails
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
            f"int {prefix}_costs_of(const int64_t shape[{f}], const unsigned char *allowed, "
            "double *cost);\n"
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
    interactions (X[j][i], per evaluated candidate i = 0, 1, ... of catalogue index idx[i]).
    Records which ones the code reads."""

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

    def expr(self, f: int, at: str = "i") -> str:
        """A column's value in code that loops over the evaluated candidates (i); an
        interaction's in X at `at` (its column: i where the loop is over classes, pos[i] where
        it is over candidates)."""
        if f < self.instance:
            self.read.add(self.names[f])
            return f"v_{self.names[f]}"
        if f < self.interactions:
            return f"INST[{f - self.instance}][idx[i]]"
        return f"X[{self.stored.setdefault(f, len(self.stored))}][{at}]"


# a loop over candidates 0..n (a multiple of LANES) in whole vectors, without a scalar tail
VECTOR_LOOP = ("  for (b = 0; b < n; b += LANES)", "    for (i = b; i < b + LANES; i++)")


def _all_of(terms: list[str]) -> str:
    """The AND of `terms` as a balanced tree (independent operations for the vector units)."""
    while len(terms) > 1:
        terms = [f"({' & '.join(terms[j:j + 2])})" for j in range(0, len(terms), 2)]
    return terms[0]


def _masked_tree(tree: LeafMasks, cols: _Columns, count: int, j: int
                 ) -> tuple[list[str], str | None, list[int], list[Split]]:
    """A tree as the j-th of a block: the lines of forest() that compute its shape mask
    s[j]; the test of its splits on interactions (an expression of X[.][i], or None); its
    fixed mask per candidate (the splits on known values); the splits on interactions that
    the test holds."""
    known = [sp for sp in tree.splits if cols.known(sp.feature)]
    fixed = [tree.mask(known, lambda sp, c=c: cols.value(sp.feature, c)) for c in range(count)]
    tested = [sp for sp in tree.splits
              if sp.feature >= cols.interactions and any(f & sp.drop for f in fixed)]
    keeps = [f"KEEP({_test(sp, cols.expr(sp.feature))}, {_mask(~sp.drop)})" for sp in tested]
    shape = [f"  s[{j}] = {_mask(tree.full)};"]
    shape += [f"  s[{j}] &= KEEP({_test(sp, cols.expr(sp.feature))}, {_mask(~sp.drop)});"
              for sp in tree.splits if sp.feature < cols.shape]
    return shape, _all_of(keeps) if keeps else None, fixed, tested


def _leaves16(leaves: str, j: int) -> str:
    """The values of the leaves (16 from `leaves`) at the exit indices e[j] (bits 0 to 3)."""
    return (f"_mm512_permutex2var_pd(_mm512_load_pd({leaves}), e[{j}], "
            f"_mm512_load_pd({leaves} + 8))")


def _leaves32(leaves: str, j: int) -> str:
    """The same for 32 leaves (bit 4 picks the half)."""
    return (f"_mm512_mask_blend_pd(_mm512_test_epi64_mask(e[{j}], sixteen), "
            f"{_leaves16(leaves, j)}, {_leaves16(f'{leaves} + 16', j)})")


def _wide_block(number: int, offsets: Sequence[int], tested: Sequence[Sequence[Split]],
                sizes: Sequence[int], cols: _Columns) -> str:
    """wide{number}(): block{number}() as AVX-512 code (x86-64, GCC or clang), the same masks and
    sums (each tree's `sizes` leaves, at most 64, from `offsets` in LEAVES). Per vector of
    classes, each distinct comparison once and, where a test fails, its keep-mask ANDed in
    under the lane mask (thresholds and keep-masks read from tables: OPAQUE keeps them out
    of immediates and in the loop, each a broadcast operand); the trees' class masks
    transposed so that a class's are contiguous. Per vector of candidates, each one's fixed
    masks and its class's ANDed eight trees at a time, the exit leaves found as vectors (63
    minus the leading zeros of the lowest bit) and transposed, so that each tree's leaves
    are looked up (permutes of the tree's leaves) and added for eight candidates at once,
    tree after tree."""
    compares: dict[tuple[int, float, bool], int] = {}
    keeps: list[int] = []
    body: list[str] = []
    width = -(-len(tested) // 8) * 8
    for j in range(width):
        if j >= len(tested):
            body.append(f"    a[{j}] = _mm512_set1_epi64(-1);")
            continue
        body.append(f"    a[{j}] = _mm512_set1_epi64((long long)s[{j}]);")
        for sp in tested[j]:
            row = cols.stored[sp.feature]
            key = (row, sp.threshold, sp.nan_left)
            if key not in compares:
                compares[key] = len(compares)
                # where the test fails: v > t (NaN passes), or !(v <= t) (NaN fails)
                predicate = "_CMP_GT_OQ" if sp.nan_left else "_CMP_NLE_UQ"
                body.append(f"    const __mmask8 k{compares[key]} = _mm512_cmp_pd_mask("
                            f"_mm512_loadu_pd(&X[{row}][b]), _mm512_set1_pd(th[{compares[key]}]),"
                            f" {predicate});")
            body.append(f"    a[{j}] = _mm512_mask_and_epi64(a[{j}], k{compares[key]}, a[{j}], "
                        f"_mm512_set1_epi64((long long)kp[{len(keeps)}]));")
            keeps.append(~sp.drop)
    body += [f"    transpose8(a + {g});\n" + "\n".join(
        f"    _mm512_store_si512((void *)&T[b + {c}][{g}], a[{g + c}]);" for c in range(8))
        for g in range(0, width, 8)]
    sums = []
    for g in range(0, width, 8):
        left = len(tested) - g
        for c in range(8):
            row = f"FIXED{number}[idx[i + {c}]] + {g}"
            load = (f"_mm512_loadu_si512((const void *)({row}))" if left >= 8 else
                    f"_mm512_maskz_loadu_epi64(0x{(1 << left) - 1:x}, {row})")
            sums += [f"    m = _mm512_and_si512({load},",
                     f"        _mm512_load_si512((const void *)(T[pos[i + {c}]] + {g})));",
                     "    m = _mm512_and_si512(m, _mm512_sub_epi64(_mm512_setzero_si512(), m));",
                     f"    e[{c}] = _mm512_sub_epi64(top, _mm512_lzcnt_epi64(m));"]
        sums.append("    transpose8(e);")
        for j in range(min(left, 8)):
            leaves, size = f"LEAVES + {offsets[g + j]}", sizes[g + j]
            if size <= 8:
                value = f"_mm512_permutexvar_pd(e[{j}], _mm512_load_pd({leaves}))"
            elif size <= 16:
                value = _leaves16(leaves, j)
            elif size <= 32:
                value = _leaves32(leaves, j)
            else:
                value = (f"_mm512_mask_blend_pd(_mm512_test_epi64_mask(e[{j}], thirtytwo), "
                         f"{_leaves32(leaves, j)}, {_leaves32(f'{leaves} + 32', j)})")
            sums.append(f"    t = _mm512_add_pd(t, {value});")
    thresholds = [key[1] for key in compares]
    return "\n".join([
        "#ifdef WIDE_TESTS",
        f"static const double TH{number}[{max(len(thresholds), 1)}] = {{\n  "
        f"{_rows(thresholds or [0.0], 4)}}};",
        f"static const uint64_t KP{number}[{max(len(keeps), 1)}] = {{\n  "
        f"{_rows([_mask(k) for k in keeps] or ['0'], 4)}}};",
        f"WIDE static void wide{number}(double X[restrict NX][NP], const uint64_t *restrict s,",
        "    const int *restrict idx, const int *restrict pos, int live, int classes, "
        "double *restrict part) {",
        f"  uint64_t T[NP][{width}] __attribute__((aligned(64)));",
        "  const __m512i sixteen = _mm512_set1_epi64(16), thirtytwo = _mm512_set1_epi64(32);",
        "  const __m512i top = _mm512_set1_epi64(63);",
        f"  __m512i a[{width}], e[LANES], m;", "  const int n = PADDED(classes);", "  int b, i;",
        "  (void)sixteen;", "  (void)thirtytwo;",
        "  for (b = 0; b < n; b += LANES) {", f"    const double *th = TH{number};",
        f"    const uint64_t *kp = KP{number};", "    OPAQUE(th);", "    OPAQUE(kp);", *body, "  }",
        "  for (i = 0; i < live; i += LANES) {", "    __m512d t = _mm512_loadu_pd(part + i);",
        *sums, "    _mm512_storeu_pd(part + i, t);", "  }", "}", "#endif"])


TRANSPOSED = """#ifdef WIDE_TESTS
/* r[c] becomes the vector of lane c of r[0..8) (an 8 x 8 transpose of 64-bit lanes) */
WIDE static inline void transpose8(__m512i *r) {
  const __m512i lo = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
  const __m512i hi = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
  const __m512i t0 = _mm512_unpacklo_epi64(r[0], r[1]), t1 = _mm512_unpackhi_epi64(r[0], r[1]);
  const __m512i t2 = _mm512_unpacklo_epi64(r[2], r[3]), t3 = _mm512_unpackhi_epi64(r[2], r[3]);
  const __m512i t4 = _mm512_unpacklo_epi64(r[4], r[5]), t5 = _mm512_unpackhi_epi64(r[4], r[5]);
  const __m512i t6 = _mm512_unpacklo_epi64(r[6], r[7]), t7 = _mm512_unpackhi_epi64(r[6], r[7]);
  const __m512i u0 = _mm512_permutex2var_epi64(t0, lo, t2);
  const __m512i u1 = _mm512_permutex2var_epi64(t1, lo, t3);
  const __m512i u2 = _mm512_permutex2var_epi64(t0, hi, t2);
  const __m512i u3 = _mm512_permutex2var_epi64(t1, hi, t3);
  const __m512i v0 = _mm512_permutex2var_epi64(t4, lo, t6);
  const __m512i v1 = _mm512_permutex2var_epi64(t5, lo, t7);
  const __m512i v2 = _mm512_permutex2var_epi64(t4, hi, t6);
  const __m512i v3 = _mm512_permutex2var_epi64(t5, hi, t7);
  r[0] = _mm512_shuffle_i64x2(u0, v0, 0x44);
  r[1] = _mm512_shuffle_i64x2(u1, v1, 0x44);
  r[2] = _mm512_shuffle_i64x2(u2, v2, 0x44);
  r[3] = _mm512_shuffle_i64x2(u3, v3, 0x44);
  r[4] = _mm512_shuffle_i64x2(u0, v0, 0xee);
  r[5] = _mm512_shuffle_i64x2(u1, v1, 0xee);
  r[6] = _mm512_shuffle_i64x2(u2, v2, 0xee);
  r[7] = _mm512_shuffle_i64x2(u3, v3, 0xee);
}
#endif"""


def _block(number: int, offsets: Sequence[int], tests: Sequence[str | None]) -> str:
    """block{number}(): the interaction `tests` of a block's masked trees (whose leaves start
    at `offsets` in LEAVES) once per class of candidates (X's columns 0..classes), ANDed with
    the trees' shape masks there, then for candidates idx[0..live) their exit leaves (the fixed
    masks and their class's, or the shape's where a tree tests no interaction), whose values
    are added to the sums in tree order."""
    lines = [f"      T[{j}][i] = s[{j}] & {test};" for j, test in enumerate(tests) if test]
    loop = (*VECTOR_LOOP[:-1], f"{VECTOR_LOOP[-1]} {{", *lines, "    }") if lines else ()
    exits = [f"fixed[{j}] & T[{j}][u]" if test else f"s[{j}] & fixed[{j}]"
             for j, test in enumerate(tests)]
    return "\n".join([
        f"VECTOR_CLONES static void block{number}(double X[restrict NX][NP], "
        "const uint64_t *restrict s,", "    const int *restrict idx, const int *restrict pos, "
        "int live, int classes, double *restrict part) {",
        *((f"  uint64_t T[{len(tests)}][NP];", "  const int n = PADDED(classes);", "  int b, i;")
          if lines else ("  int i;", "  (void)X;", "  (void)classes;")),
        *loop,
        "  for (i = 0; i < live; i++) {", f"    const uint64_t *fixed = FIXED{number}[idx[i]];",
        "    const int u = pos[i];", "    double t = part[i];", "    (void)u;",
        *(f"    t += (LEAVES + {k})[LOWEST({e})];" for k, e in zip(offsets, exits)),
        "    part[i] = t;", "  }", "}"])


def _branches(t: Tree, n: int, cols: _Columns, indent: str) -> list[str]:
    if n < 0 or not t.feature:
        return [f"{indent}t += {_double(t.leaves[~n if n < 0 else 0])};"]
    split = Split(t.feature[n], t.threshold[n], nan_left(t, n), 0)
    return ([f"{indent}if ({_test(split, cols.expr(split.feature, 'pos[i]'))}) {{"]
            + _branches(t, t.left[n], cols, indent + "  ") + [f"{indent}}} else {{"]
            + _branches(t, t.right[n], cols, indent + "  ") + [f"{indent}}}"])


def _branchy_tree(k: int, t: Tree, cols: _Columns) -> list[str]:
    """Tree k as nested if/else code per candidate (more leaves than a mask holds)."""
    return ([f"  for (i = 0; i < live; i++) {{  /* tree {k} */", "    double t = 0.0;"]
            + _branches(t, 0, cols, "    ") + ["    part[i] += t;", "  }"])


def _needed(spec: FeatureSpec, names: set[str]) -> set[str]:
    """`names` and every value their formulas read, recursively."""
    wanted = set(names)
    for name, formula in reversed((*spec.shape_formulas, *spec.interactions)):
        if name in wanted:
            wanted |= _names(formula)
    return wanted


def _shape_lines(spec: FeatureSpec, wanted: set[str]) -> list[str]:
    """The shape's values in `wanted` (once per call), each after what it is computed from."""
    lines = [f"  const double v_{f} = (double)shape[{i}];"
             for i, f in enumerate(spec.inputs) if f in wanted]
    lines += [f"  const double v_{n} = {_double(v)};" for n, v in spec.constants().items()
              if n in wanted]
    return lines + [f"  const double v_{n} = {c_expression(f)};" for n, f in spec.shape_formulas
                    if n in wanted]


def _interaction_inputs(spec: FeatureSpec, cols: _Columns) -> list[str]:
    """The instance columns the interactions that the trees read are computed from."""
    wanted = _needed(spec, {cols.names[f] for f in cols.stored})
    return [n for n in INSTANCE if n in wanted]


def _classes(spec: FeatureSpec, cols: _Columns, table: np.ndarray) -> list[int]:
    """Each candidate's class: candidates with the same values of the interactions' instance
    columns have the same interactions on every shape (numbered in catalogue order)."""
    at = [spec.instance.index(n) for n in _interaction_inputs(spec, cols)]
    keys: dict[tuple, int] = {}
    return [keys.setdefault(tuple(repr(float(v)) for v in row[at]), len(keys)) for row in table]


def _features(spec: FeatureSpec, cols: _Columns) -> str:
    """features(): the interactions the trees read, per class of the evaluated candidates
    (idx: a candidate of each), into X: the instance columns they need gathered first, so that
    the arithmetic runs as vector loops."""
    if not cols.stored:
        return ""
    wanted = _needed(spec, {cols.names[f] for f in cols.stored})
    inst = _interaction_inputs(spec, cols)
    gather = [f"    I[{j}][i] = INST[{spec.instance.index(n)}][idx[i]];"
              for j, n in enumerate(inst)]
    per = [f"    const double v_{n} = I[{j}][i];" for j, n in enumerate(inst)]
    per += [f"    const double v_{n} = {c_expression(f)};" for n, f in spec.interactions
            if n in wanted]
    per += [f"    X[{j}][i] = v_{cols.names[f]};" for f, j in cols.stored.items()]
    return "\n".join([
        "VECTOR_CLONES static void features(const int64_t *shape, int *restrict idx, "
        "int n, double X[restrict NX][NP]) {", *_shape_lines(spec, wanted),
        f"  double I[{max(len(inst), 1)}][NP];", "  int b, i;", "  (void)shape;", "  (void)I;",
        "  for (i = 0; i < n; i++) {", *gather, "  }", *VECTOR_LOOP[:-1],
        f"{VECTOR_LOOP[-1]} {{", *("  " + line for line in per), "    }", "}"])


def _debruijn() -> list[int]:
    table = [0] * 64
    for i in range(64):
        table[((1 << i) * _DEBRUIJN & (2**64 - 1)) >> 58] = i
    return table


SQUEEZE = "classes = squeeze(X, pos, live, classes);"  # after a compaction in forest()


class _Forest:
    """The trees as C: the functions of their blocks, the lines of forest() that run the blocks
    and the branchy trees in the model's order, the blocks' fixed masks (candidate x tree), the
    leaf tables, and per block (a branchy tree is one) and candidate the lowest and highest sum
    of the leaves its fixed masks keep."""

    def __init__(self, trees: Sequence[Tree], cols: _Columns, count: int, prune: bool,
                 cascade_after: int | None = None) -> None:
        self.prune, self.cols = prune, cols
        self.wide = False  # whether a block has an AVX-512 copy
        # the cascade's cut: after the first block that brings the sums to this many trees, if
        # trees remain after it (`cut`: whether forest() makes it)
        self.cascade_after, self.cut = cascade_after, False
        self.summed, self.total = 0, len(trees)
        self.functions: list[str] = []
        self.lines: list[str] = []
        self.fixed: list[list[list[int]]] = []
        self.leaves: list[float] = []  # the masked trees' leaves, one table
        self.offset: dict[int, int] = {}  # a masked tree's first leaf in it
        self.low: list[np.ndarray] = []
        self.high: list[np.ndarray] = []
        self.group: list[tuple[int, LeafMasks, list[int], str | None]] = []
        for k, t in enumerate(trees):
            masks = leaf_masks(t)
            if masks is None:
                self.flush()
                self.lines += _branchy_tree(k, t, cols)
                self.summed = k + 1
                self.end_block(np.full(count, min(t.leaves)), np.full(count, max(t.leaves)))
                continue
            lines, test, rows, tested = _masked_tree(masks, cols, count, len(self.group))
            self.lines += lines
            self.group.append((k, masks, rows, test, tested))
            self.offset[k] = len(self.leaves)  # whole vectors of 32, padded with zeros
            self.leaves += (*masks.leaves, *[0.0] * (-len(masks.leaves) % 32))
            if len(self.group) == GROUP:
                self.flush()
        self.flush()
        if prune and self.low:
            self.lines.pop()  # nothing to prune after the last block

    def flush(self) -> None:
        """The group's block: its function, fixed masks and bounds, and its call."""
        if not self.group:
            return
        number = len(self.fixed)
        trees, _, rows, tests, tested = zip(*self.group)
        self.summed = trees[-1] + 1
        offsets = [self.offset[k] for k in trees]
        call = "(X, s, idx, pos, live, classes, part);"
        sizes = [len(masks.leaves) for _, masks, _, _, _ in self.group]
        if any(tests):  # and an AVX-512 copy, run where it can
            self.functions.append(_wide_block(number, offsets, tested, sizes, self.cols))
            self.lines += ["#ifdef WIDE_TESTS", f"  if (wide) wide{number}{call} else", "#endif"]
            self.wide = True
        self.functions.append(_block(number, offsets, tests))
        self.fixed.append([list(row) for row in zip(*rows)])
        self.lines.append(f"  block{number}{call}")
        reach = [[np.array([v for b, v in enumerate(masks.leaves) if f >> b & 1]) for f in fixed]
                 for _, masks, fixed, _, _ in self.group]
        self.end_block(sum(np.array([r.min() for r in tree]) for tree in reach),
                       sum(np.array([r.max() for r in tree]) for tree in reach))
        self.group = []

    def end_block(self, low: np.ndarray, high: np.ndarray) -> None:
        self.low.append(low)
        self.high.append(high)
        if self.prune:
            self.lines.append(f"  if (k) {{ live = prune(idx, part, pos, live, "
                              f"{len(self.low)}, k); {SQUEEZE} }}")
        if (not self.cut and self.cascade_after is not None
                and self.cascade_after <= self.summed < self.total):
            self.lines.append(f"  if (k) {{ live = cascade(idx, part, pos, live, k); {SQUEEZE} }}")
            self.cut = True

    def rest(self, sign: str) -> tuple[np.ndarray, np.ndarray]:
        """Per candidate and block b >= 1: the lowest and highest cost still to come from
        blocks b on (sums of leaves of the raw score, negated where the cost is)."""
        low = np.cumsum(np.array(self.low[::-1]), axis=0)[::-1][1:].T
        high = np.cumsum(np.array(self.high[::-1]), axis=0)[::-1][1:].T
        return (-high, -low) if sign else (low, high)


def _tables(table: np.ndarray, forest: _Forest, code: Sequence[str], classes: Sequence[int]
            ) -> str:
    """Each candidate's class, the instance columns (where `code` reads them), the blocks'
    fixed masks and the trees' leaves."""
    out = []
    if any("CLASS[" in line for line in code):
        out += ["/* per candidate: its class (the same interactions on every shape) */",
                f"static const int CLASS[NC] = {{\n  {_rows(list(classes), 16)}}};"]
    if any("INST[" in line for line in code):
        out.append("static const double INST[NI][NC] = {\n  " + ",\n  ".join(
            "{" + _rows([float(v) for v in col], 4) + "}" for col in table.T) + "};")
    if forest.leaves:
        out.append("/* per block, candidate and tree: the leaves kept by the splits on known "
                   "values */")
        out += [f"static const uint64_t FIXED{b}[NC][{len(block[0])}] = {{\n  " + ",\n  ".join(
                    "{" + _rows([_mask(m) for m in row], 4).replace("\n", "\n ") + "}"
                    for row in block) + "};" for b, block in enumerate(forest.fixed)]
        out += ["#if !defined(__GNUC__) && !defined(__clang__)",
                f"static const unsigned char DEBRUIJN[64] = {{\n  {_rows(_debruijn(), 16)}}};",
                "#endif", "/* the trees' leaves, tree after tree */",
                f"static const double LEAVES[{len(forest.leaves)}] ALIGNED = {{\n  "
                f"{_rows(list(forest.leaves), 4)}}};"]
    return "\n".join(out)


SAFE_BODY = """  if (REFERENCE[c]) return 0;
  for (int f = 0; f < NF; f++) {
    const double v = (double)shape[SUPPORT_FIELD[f]];
    if (!(v >= SUPPORT_LOW[c * NF + f] && v <= SUPPORT_HIGH[c * NF + f])) return 0;
  }
  return 1;"""


def _margin(trees: Sequence[Tree]) -> float:
    """More than rounding can move a sum of leaves (or a bound of one, summed at generation in
    another order) from the exact sum: a bound of any partial sum's size, times the unit
    roundoff, times the additions on the way, with room to spare."""
    largest = sum(max(abs(v) for v in t.leaves) for t in trees)
    return 8.0 * (len(trees) + 2) * 2.0**-53 * (largest + 1.0)


def _prune(forest: _Forest, trees: Sequence[Tree], sign: str) -> str:
    """prune() and its tables: the candidates that can still be needed after a block."""
    low, high = forest.rest(sign)
    tables = "\n".join(
        f"static const double {name}[NC][{len(forest.low) - 1}] = {{\n  " + ",\n  ".join(
            "{" + _rows([float(v) for v in row], 4).replace("\n", "\n ") + "}"
            for row in values) + "};"
        for name, values in (("REST_LOW", low), ("REST_HIGH", high)))
    return f"""/* per candidate and block b >= 1: its lowest and highest cost from blocks b on (the
   leaves its fixed masks keep), and more than rounding moves a sum of leaves */
{tables}
static const double MARGIN = {_double(_margin(trees))};

/* Keeps, of the `live` candidates summed over the blocks before `block`, those whose cost can
   still be among the k lowest or in the guard's head (up to the GUARD_DEPTH-th lowest of a
   family that is not reference-speed): not one whose lowest possible cost exceeds both the
   k-th lowest highest possible cost and the head's by more than rounding explains (compact());
   returns how many are left. */
static int prune(int *idx, double *part, int *pos, int live, int block, int k) {{
  double low[NP], head[GUARD_DEPTH + 1], limit, most = -INFINITY;
  unsigned char keep[NP];
  int i;
  if (live <= k) return live;
  for (i = 0; i < k; i++) low[i] = INFINITY;
  for (i = 0; i < GUARD_DEPTH; i++) head[i] = INFINITY;
  for (i = 0; i < live; i++) {{
    const double high = {sign}part[i] + REST_HIGH[idx[i]][block - 1];
    const double lowest = {sign}part[i] + REST_LOW[idx[i]][block - 1];
    offer(low, k, high);
    if (GUARD_DEPTH > 1 && !REFERENCE_OF(idx[i])) offer(head, GUARD_DEPTH, high);
    most = lowest > most ? lowest : most;
  }}
  limit = low[k - 1];
  if (GUARD_DEPTH > 1 && head[GUARD_DEPTH - 1] > limit) limit = head[GUARD_DEPTH - 1];
  limit += MARGIN;
  if (!(most > limit)) return live;
  for (i = 0; i < live; i++) keep[i] = {sign}part[i] + REST_LOW[idx[i]][block - 1] <= limit;
  return compact(idx, part, pos, live, keep);
}}"""


OFFER = """/* keeps low[0..k) the k lowest values offered, in order (start: all INFINITY) */
static void offer(double *low, int k, double v) {
  int j = k - 1;
  if (!(v < low[j])) return;
  for (; j > 0 && low[j - 1] > v; j--) low[j] = low[j - 1];
  low[j] = v;
}

/* After compact(): the classes that the live candidates (and their padding) still use,
   renumbered in order, their interaction columns moved down to match, so that the blocks
   test those classes only; returns how many. */
static int squeeze(double X[restrict NX][NP], int *pos, int live, int classes) {
  unsigned char used[NP] = {0};
  int map[NP], i, r, n = 0;
  for (i = 0; i < PADDED(live); i++) used[pos[i]] = 1;
  for (i = 0; i < classes; i++)
    if (used[i]) {
      if (n != i)
        for (r = 0; r < NX; r++) X[r][n] = X[r][i];
      map[i] = n++;
    }
  for (i = 0; i < PADDED(live); i++) pos[i] = map[pos[i]];
  return n;
}

/* Keeps the `live` candidates whose keep[i] is set, in order with their sums and classes
   (padding repeats the last); returns how many. */
static int compact(int *idx, double *part, int *pos, int live, const unsigned char *keep) {
  int i, kept = 0;
  for (i = 0; i < live; i++)
    if (keep[i]) {
      idx[kept] = idx[i];
      part[kept] = part[i];
      pos[kept] = pos[i];
      kept++;
    }
  for (i = kept; i < PADDED(kept); i++) {
    idx[i] = idx[kept - 1];
    part[i] = part[kept - 1];
    pos[i] = pos[kept - 1];
  }
  return kept;
}"""


def _cascade(keep: int, sign: str) -> str:
    """cascade(): after the first trees, only the candidates whose partial sums are among the
    best `keep` (or the caller's k, if more) go on to the others."""
    return f"""#define CASCADE_KEEP {keep}  /* the candidates the remaining trees sum */

/* Keeps, of the `live` candidates summed over the first trees, those whose partial cost is
   among the max(k, CASCADE_KEEP) lowest, and the GUARD_DEPTH lowest of families that are not
   reference-speed (the guard's head) (compact()); returns how many are left. The remaining
   trees then sum these only: the choice is the model's wherever the best candidate's partial
   cost is among them. */
static int cascade(int *idx, double *part, int *pos, int live, int k) {{
  double low[NP], head[GUARD_DEPTH + 1], limit, plain = -INFINITY;
  const int keep = k > CASCADE_KEEP ? k : CASCADE_KEEP;
  unsigned char kept[NP];
  int i;
  if (live <= keep) return live;
  for (i = 0; i < keep; i++) low[i] = INFINITY;
  for (i = 0; i < GUARD_DEPTH; i++) head[i] = INFINITY;
  for (i = 0; i < live; i++) {{
    offer(low, keep, {sign}part[i]);
    if (GUARD_DEPTH > 1 && !REFERENCE_OF(idx[i])) offer(head, GUARD_DEPTH, {sign}part[i]);
  }}
  limit = low[keep - 1];
  if (GUARD_DEPTH > 1) plain = head[GUARD_DEPTH - 1];
  for (i = 0; i < live; i++) {{
    const double v = {sign}part[i];
    kept[i] = v <= limit || (GUARD_DEPTH > 1 && v <= plain && !REFERENCE_OF(idx[i]));
  }}
  return compact(idx, part, pos, live, kept);
}}"""


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


# forest()'s classes among the candidates: a candidate of each in rep (padded with the
# first), each candidate's class in pos, then the classes' interactions
CLASSES = ("  int rep[NP], first[NCLASS];", "  for (i = 0; i < NCLASS; i++) first[i] = -1;",
           "  for (i = 0; i < n; i++) {", "    const int c = CLASS[idx[i]];",
           "    if (first[c] < 0) {", "      first[c] = classes;",
           "      rep[classes++] = idx[i];", "    }", "    pos[i] = first[c];", "  }",
           "  for (i = classes; i < PADDED(classes); i++) rep[i] = idx[0];",
           "  features(shape, rep, PADDED(classes), X);")


def _forest_function(spec: FeatureSpec, cols: _Columns, forest: _Forest, features: str) -> str:
    """forest(): the sums of leaves of the candidates idx[0..live)."""
    shape_lines = _shape_lines(spec, _needed(spec, cols.read))
    x = "double X[NX][NP];" if features else "double X[NX][NP] = {{0.0}};"
    return "\n".join([
        "/* The sums of leaves (raw scores, in the model's order) of candidates idx[0..live)",
        "   (room for NP) into part. Generated with pruning and given k > 0, only of those that",
        "   may be among the k best or in the guard's head: returns how many those are, idx",
        "   and part compacted to them. */",
        f"static int forest(const int64_t shape[{len(spec.inputs)}], int *idx, int live, "
        "double *part, int k) {", *shape_lines, f"  {x}",
        *(("  uint64_t s[GROUP];",) if forest.leaves else ()),
        "  int pos[NP];", "  int i, n = PADDED(live), classes = 0;",
        *(("#ifdef WIDE_TESTS", "  const int wide = HAVE_WIDE;", "#endif") if forest.wide else ()),
        "  (void)shape;",
        "  (void)k;", "  for (i = live; i < n; i++) idx[i] = idx[live - 1];",
        *(CLASSES if features else ("  for (i = 0; i < n; i++) pos[i] = 0;", "  classes = 1;")),
        "  for (i = 0; i < n; i++) part[i] = 0.0;", *forest.lines, "  return live;", "}"])


def c_source(spec: FeatureSpec, catalogue: Sequence[CatalogueEntry], model_text: str,
             kind: str, prefix: str, note: str = "", guard_depth: int = 0,
             text_fields: Sequence[str] = (), prune: bool = False,
             cascade: tuple[int, int] | None = None) -> str:
    """The C file of a model (see the module docstring for its interface); `text_fields`: the
    shape fields that take names (not part of a candidate's support); `prune`: rank and best
    drop candidates by bounds between blocks (see prune()); `cascade` (trees, keep): rank and
    best sum the remaining trees only for the `keep` best after the block that reaches `trees`
    (see cascade())."""
    trees = parse_trees(model_text)
    table = instance_matrix(spec, catalogue)
    count = len(catalogue)
    cols = _Columns(spec, table)
    forest = _Forest(trees, cols, count, prune, cascade[0] if cascade else None)
    features = _features(spec, cols)
    classes = _classes(spec, cols, table)
    sign = "" if kind == "regressor" else "-"
    run = _forest_function(spec, cols, forest, features)
    names = ", ".join('"' + e.name.replace('"', "") + '"' for e in catalogue)
    fields = support_fields(spec.inputs, text_fields)
    safe_body = "  return 1;" if not fields else SAFE_BODY
    pruning = _prune(forest, trees, sign) if prune and len(forest.low) > 1 else ""
    cascading = _cascade(cascade[1], sign) if forest.cut else ""
    offering = OFFER if pruning or cascading else ""
    return f"""/* farm-select C export (generated; do not edit). {prefix}
 * {note}
 * Model: LightGBM {kind}, {len(trees)} trees, {len(spec.names)} features (version {spec.version}),
 * {count} candidates. Build: cc -std=c99 -O2 -ffp-contract=off -c this.c (link -lm). */
#include <math.h>
#include <stdint.h>

#define NC {count}
#define LANES {LANES}  /* candidate loops cover whole multiples of this, so that they vectorise */
#define PADDED(n) (((n) + LANES - 1) / LANES * LANES)  /* padding repeats the last candidate */
#define NP PADDED(NC)
#define NI {len(spec.instance)}
#define NX {max(len(cols.stored), 1)}
#define NCLASS {max(classes) + 1}  /* classes of candidates with the same interactions */
#define GROUP {GROUP}  /* trees whose leaves are added in one pass over the candidates: a block */
#define NF {max(len(fields), 1)}  /* the shape fields a candidate's support bounds */
#define GUARD_DEPTH {guard_depth if guard_depth > 1 else 0}  /* the best this many: safe first */
#define REFERENCE_OF(c) {"REFERENCE[c]" if fields else "0"}
/* all ones where the test passes, else the mask that clears the left subtree's leaves */
#define KEEP(test, keep) ((keep) | (UINT64_C(0) - (uint64_t)(test)))
/* GCC: floor and ceil as vector instructions too (values unchanged: no trap is relied on) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
/* x86-64 with glibc: AVX-512 and AVX2 copies of the candidate loops beside the portable ones,
 * the one to run chosen when the library loads (values unchanged) */
#ifdef __has_attribute
#if __has_attribute(target_clones) && defined(__x86_64__) && defined(__GLIBC__) \\
    && !defined(__AVX2__)
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef VECTOR_CLONES
#define VECTOR_CLONES
#endif
/* x86-64, GCC or clang: the interaction tests also as AVX-512 code, run where the processor
 * has it (values unchanged) */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) \\
    && !defined(FARM_SELECT_PORTABLE)
#include <immintrin.h>
#define WIDE_TESTS
#define WIDE __attribute__((target("avx512f,avx512cd")))
#define HAVE_WIDE (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd"))
#define OPAQUE(p) __asm__("" : "+r"(p))
#define ALIGNED __attribute__((aligned(64)))
#else
#define ALIGNED
#endif
/* the index of the lowest set bit: the exit leaf */
#if defined(__GNUC__) || defined(__clang__)
#define LOWEST(m) __builtin_ctzll(m)
#else
#define LOWEST(m) DEBRUIJN[(((m) & (UINT64_C(0) - (m))) * {_mask(_DEBRUIJN)}) >> 58]
#endif

static const char *const NAMES[NC] = {{{names}}};
{_tables(table, forest, (features, run), classes)}
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

{TRANSPOSED}
{features}
{chr(10).join(forest.functions)}
{offering}
{pruning}
{cascading}

{run}

int {prefix}_count(void) {{ return NC; }}
const char *{prefix}_name(int i) {{ return i >= 0 && i < NC ? NAMES[i] : 0; }}

int {prefix}_costs(const int64_t shape[{len(spec.inputs)}], double *cost) {{
  double part[NP];
  int idx[NP], c;
  for (c = 0; c < NC; c++) idx[c] = c;
  forest(shape, idx, NC, part, 0);
  for (c = 0; c < NC; c++) cost[c] = {sign}part[c];
  return NC;
}}

int {prefix}_costs_of(const int64_t shape[{len(spec.inputs)}], const unsigned char *allowed,
          double *cost) {{
  double part[NP];
  int idx[NP], live = 0, c;
  for (c = 0; c < NC; c++) {{
    cost[c] = HUGE_VAL;
    if (!allowed || allowed[c]) idx[live++] = c;
  }}
  if (live) forest(shape, idx, live, part, 0);
  for (c = 0; c < live; c++) cost[idx[c]] = {sign}part[c];
  return live;
}}

/* whether candidate c's family is not reference-speed and its support holds the shape */
static int safe(const int64_t *shape, int c) {{
{safe_body}
}}

int {prefix}_rank(const int64_t shape[{len(spec.inputs)}], const unsigned char *allowed, int k,
          int *out) {{
  double cost[NP];
  int idx[NP], order[NC];
  int live = 0, found = 0, plain = 0, head = 0;
  for (int c = 0; c < NC; c++) {{  /* without a branch on the mask */
    idx[live] = c;
    live += !allowed || allowed[c] != 0;
  }}
  /* the sums of the allowed candidates only (with pruning, of those that can be needed) */
  if (live) live = forest(shape, idx, live, cost, k > 1 ? k : 1);
  for (int i = 0; i < live; i++) cost[i] = {sign}cost[i];
  /* best first (ties: catalogue order), until k are found and the guard's head is whole: up
     to and including the GUARD_DEPTH-th candidate of a family that is not reference-speed;
     one taken costs INFINITY from then on (the others are finite: sums of finite leaves), and
     the scans have no branch that depends on the costs */
  for (; found < live && (found < k || (GUARD_DEPTH > 1 && plain < GUARD_DEPTH)); found++) {{
    int best = 0;
    double low = cost[0];
    for (int i = 1; i < live; i++) {{
      const int lower = cost[i] < low;
      best = lower ? i : best;
      low = lower ? cost[i] : low;
    }}
    cost[best] = INFINITY;
    order[found] = idx[best];
    if (plain < GUARD_DEPTH) {{
      head = found + 1;
      plain += !REFERENCE_OF(order[found]);
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
