"""The model as one dependency-free C file (C99 + libm) for a dispatcher to link.

It holds the candidate catalogue (names and instance columns), the feature formulas of
features.py translated to C expression by expression (same operations in the same order, so
the doubles are identical; compile with -ffp-contract=off so no multiply-add is fused), and the
LightGBM trees from the text model as nested if/else code, one function per tree looping over
the candidates, with LightGBM's missing-value rules folded into each comparison. The caller
supplies applicability (`allowed`, one byte per candidate, NULL for all): its kernels' launch
rules live with the dispatcher, as the descriptors' do in Python.

    int  P_count(void);  const char *P_name(int i);
    int  P_costs(const int64_t shape[14], double *cost);   lower is better, one per candidate
    int  P_best(const int64_t shape[14], const unsigned char *allowed);     -1 if none allowed
    int  P_rank(const int64_t shape[14], const unsigned char *allowed, int k, int *out);
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from farm.problems import CONV_FIELDS
from farm.select.catalogue import CatalogueEntry
from farm.select.features import INSTANCE, INTERACTIONS, FeatureSpec, instance_matrix

_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_HELPERS = ("cdiv", "fdiv", "vmin", "vmax")


@dataclass(frozen=True)
class Tree:
    """One LightGBM tree: node tables (children < 0 are leaves ~child) and leaf values."""

    feature: tuple[int, ...]
    threshold: tuple[float, ...]
    decision: tuple[int, ...]
    left: tuple[int, ...]
    right: tuple[int, ...]
    leaves: tuple[float, ...]


def parse_trees(model_text: str) -> list[Tree]:
    """The trees of a LightGBM text model (numerical splits only)."""
    trees, block = [], None
    for line in model_text.splitlines() + ["end of trees"]:
        if line.startswith("Tree=") or line.startswith("end of trees"):
            if block is not None:
                trees.append(_tree(block))
            block = {} if line.startswith("Tree=") else None
            if block is None and line.startswith("end of trees"):
                break
        elif block is not None and "=" in line:
            key, _, value = line.partition("=")
            block[key] = value.split()
    return trees


def _tree(b: dict[str, list[str]]) -> Tree:
    if int(b.get("num_cat", ["0"])[0]):
        raise ValueError("categorical splits are not exported (no feature is categorical)")
    ints = lambda k: tuple(int(v) for v in b.get(k, []))  # noqa: E731
    return Tree(ints("split_feature"), tuple(float(v) for v in b.get("threshold", [])),
                ints("decision_type"), ints("left_child"), ints("right_child"),
                tuple(float(v) for v in b["leaf_value"]))


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


def header(prefix: str) -> str:
    return (f"/* farm-select C export: {prefix} (generated; see the .c file) */\n"
            f"#ifndef {prefix.upper()}_H\n#define {prefix.upper()}_H\n#include <stdint.h>\n"
            "#ifdef __cplusplus\nextern \"C\" {\n#endif\n"
            f"int {prefix}_count(void);\nconst char *{prefix}_name(int i);\n"
            f"int {prefix}_costs(const int64_t shape[14], double *cost);\n"
            f"int {prefix}_best(const int64_t shape[14], const unsigned char *allowed);\n"
            f"int {prefix}_rank(const int64_t shape[14], const unsigned char *allowed, int k, "
            "int *out);\n#ifdef __cplusplus\n}\n#endif\n#endif\n")


def _condition(t: Tree, n: int) -> str:
    """LightGBM's numerical decision at node n as one comparison: where NaN goes left (its
    default direction, or 0 <= threshold when NaN is not the missing type) the test is
    !(v > t), which NaN passes; else v <= t, which NaN fails."""
    missing, threshold = (t.decision[n] >> 2) & 3, t.threshold[n]
    if missing == 1:
        raise ValueError("zero-as-missing splits are not exported (zero_as_missing is off)")
    nan_left = bool(t.decision[n] & 2) if missing == 2 else 0.0 <= threshold
    v = f"r[{t.feature[n]}]"
    return f"!({v} > {_double(threshold)})" if nan_left else f"{v} <= {_double(threshold)}"


def _tree_code(t: Tree, n: int, indent: str) -> list[str]:
    if n < 0 or not t.feature:
        return [f"{indent}s += {_double(t.leaves[~n if n < 0 else 0])};"]
    return ([f"{indent}if ({_condition(t, n)}) {{"] + _tree_code(t, t.left[n], indent + "  ")
            + [f"{indent}}} else {{"] + _tree_code(t, t.right[n], indent + "  ")
            + [f"{indent}}}"])


def _tree_function(k: int, t: Tree) -> str:
    """Tree k over every candidate row (one branch site per node, so the branch predictor
    sees the same shape decisions candidate after candidate)."""
    body = "\n".join(_tree_code(t, 0, "    "))
    return (f"static void tree{k}(double x[NC][NF], const unsigned char *skip, double *cost) {{\n"
            f"  for (int c = 0; c < NC; c++) {{\n    const double *r = x[c];\n    double s = 0.0;\n"
            f"    if (skip && skip[c]) continue;\n{body}\n    cost[c] += s;\n  }}\n}}")


def c_source(spec: FeatureSpec, catalogue: Sequence[CatalogueEntry], model_text: str,
             kind: str, prefix: str, note: str = "") -> str:
    """The C file of a model (see the module docstring for its interface)."""
    trees = parse_trees(model_text)
    table = instance_matrix(spec, catalogue)
    head = [*CONV_FIELDS, *(n for n, _ in spec.shape_formulas), *spec.constants()]
    nh, ni = len(head), len(spec.instance)
    assert list(spec.names) == [*head, *spec.instance, *(n for n, _ in INTERACTIONS)]
    names = ", ".join('"' + e.name.replace('"', "") + '"' for e in catalogue)
    inst_init = ",\n  ".join("{" + ", ".join(_double(float(v)) for v in row) + "}"
                             for row in table)
    shape_lines = [f"  const double v_{f} = (double)shape[{i}];" for i, f in enumerate(CONV_FIELDS)]
    shape_lines += [f"  const double v_{n} = {_double(v)};" for n, v in spec.constants().items()]
    shape_lines += [f"  const double v_{n} = {c_expression(f)};" for n, f in spec.shape_formulas]
    used = {n.id for _, f in INTERACTIONS for n in ast.walk(ast.parse(f))
            if isinstance(n, ast.Name)}
    inst_lines = [f"    const double v_{n} = INST[c][{spec.instance.index(n)}];"
                  for n in INSTANCE if n in used]
    inter_lines = [f"    const double v_{n} = {c_expression(f)};" for n, f in INTERACTIONS]
    inter_lines += [f"    r[{nh + ni + i}] = v_{n};" for i, (n, _) in enumerate(INTERACTIONS)]
    sign = "" if kind == "regressor" else "-"
    functions = "\n\n".join(_tree_function(k, t) for k, t in enumerate(trees))
    calls = "\n".join(f"  tree{k}(x, skip, cost);" for k in range(len(trees)))
    return f"""/* farm-select C export (generated; do not edit). {prefix}
 * {note}
 * Model: LightGBM {kind}, {len(trees)} trees, {len(spec.names)} features (version {spec.version}),
 * {len(catalogue)} candidates. Build: cc -std=c99 -O2 -ffp-contract=off -c this.c (link -lm). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define NF {len(spec.names)}
#define NH {nh}
#define NI {ni}
#define NC {len(catalogue)}

static const char *const NAMES[NC] = {{{names}}};
static const double INST[NC][NI] = {{
  {inst_init}}};

static double cdiv(double a, double b) {{ return ceil(a / b); }}
static double fdiv(double a, double b) {{ return floor(a / b); }}
static double vmin(double a, double b) {{ return (isnan(a) || isnan(b)) ? NAN : (a < b ? a : b); }}
static double vmax(double a, double b) {{ return (isnan(a) || isnan(b)) ? NAN : (a > b ? a : b); }}

static void features(const int64_t shape[14], double x[NC][NF]) {{
{chr(10).join(shape_lines)}
  const double head[NH] = {{{", ".join(f"v_{n}" for n in head)}}};
  for (int c = 0; c < NC; c++) {{
    double *r = x[c];
    memcpy(r, head, sizeof head);
    memcpy(r + NH, INST[c], sizeof INST[c]);
{chr(10).join(inst_lines)}
{chr(10).join(inter_lines)}
  }}
}}

{functions}

int {prefix}_count(void) {{ return NC; }}
const char *{prefix}_name(int i) {{ return i >= 0 && i < NC ? NAMES[i] : 0; }}

static void costs(const int64_t shape[14], const unsigned char *skip, double *cost) {{
  double x[NC][NF];
  features(shape, x);
  for (int c = 0; c < NC; c++) cost[c] = 0.0;
{calls}
  for (int c = 0; c < NC; c++) cost[c] = {sign}cost[c];
}}

int {prefix}_costs(const int64_t shape[14], double *cost) {{
  costs(shape, 0, cost);
  return NC;
}}

int {prefix}_rank(const int64_t shape[14], const unsigned char *allowed, int k, int *out) {{
  double cost[NC];
  unsigned char taken[NC];
  int found = 0;
  for (int c = 0; c < NC; c++) taken[c] = allowed && !allowed[c];
  costs(shape, taken, cost);  /* only the allowed candidates are evaluated */
  for (; found < k; found++) {{
    int best = -1;
    for (int c = 0; c < NC; c++)
      if (!taken[c] && (best < 0 || cost[c] < cost[best])) best = c;
    if (best < 0) break;
    taken[best] = 1;
    out[found] = best;
  }}
  return found;
}}

int {prefix}_best(const int64_t shape[14], const unsigned char *allowed) {{
  int best = -1;
  return {prefix}_rank(shape, allowed, 1, &best) ? best : -1;
}}
"""

