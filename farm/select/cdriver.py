"""Build and run the C export outside Python: a small driver program compiled with the
system C compiler against a bundle's C file, for the parity test and the latency benchmark."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

FLAGS = ("-std=c99", "-O2", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror")


def driver_source(prefix: str, fields: int) -> str:
    """A C program over the export: reads lines of `fields` shape numbers and one 0/1 per candidate
    (allowed), prints each shape's best candidate index (-1: none), then times `P_best` on
    every shape `repeats` times (argv[1]) and prints "p50_us p99_us" last."""
    return f"""#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int {prefix}_count(void);
int {prefix}_best(const int64_t shape[{fields}], const unsigned char *allowed);
static int by_value(const void *a, const void *b) {{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}}
int main(int argc, char **argv) {{
  int nc = {prefix}_count(), n = 0, cap = 1024, repeats = argc > 1 ? atoi(argv[1]) : 0;
  int64_t (*shape)[{fields}] = malloc(sizeof *shape * cap);
  unsigned char *allowed = malloc((size_t)cap * nc);
  for (;;) {{
    int i, v;
    if (n == cap) {{
      cap *= 2;
      shape = realloc(shape, sizeof *shape * cap);
      allowed = realloc(allowed, (size_t)cap * nc);
    }}
    for (i = 0; i < {fields}; i++)
      if (scanf("%lld", (long long *)&shape[n][i]) != 1) break;
    if (i < {fields}) break;
    for (i = 0; i < nc; i++) {{
      if (scanf("%d", &v) != 1) return 2;
      allowed[(size_t)n * nc + i] = (unsigned char)v;
    }}
    n++;
  }}
  for (int s = 0; s < n; s++) printf("%d\\n", {prefix}_best(shape[s], allowed + (size_t)s * nc));
  if (repeats > 0 && n > 0) {{
    double *us = malloc(sizeof *us * (size_t)n * repeats);
    volatile int sink = 0;
    for (int r = 0; r < repeats; r++)
      for (int s = 0; s < n; s++) {{
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        sink += {prefix}_best(shape[s], allowed + (size_t)s * nc);
        clock_gettime(CLOCK_MONOTONIC, &b);
        us[(size_t)r * n + s] = (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3;
      }}
    qsort(us, (size_t)n * repeats, sizeof *us, by_value);
    printf("%.3f %.3f\\n", us[(size_t)n * repeats / 2], us[(size_t)n * repeats * 99 / 100]);
  }}
  return 0;
}}
"""


def run_driver(source: str, prefix: str, shapes: Sequence[Sequence[int]],
               allowed: Sequence[Sequence[bool]], folder: str | Path, repeats: int = 0,
               strict: bool = True) -> tuple[list[int], tuple[float, float] | None]:
    """Compile the export with the driver (warnings are errors unless not `strict`: an
    earlier revision's export) and run it: each shape's best candidate index (-1: none
    allowed) and, with repeats, (p50, p99) microseconds per call."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler here")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.c").write_text(source)
    fields = len(shapes[0]) if len(shapes) else 1
    (folder / "driver.c").write_text(driver_source(prefix, fields))
    exe = folder / "select_driver"
    flags = FLAGS if strict else tuple(f for f in FLAGS if f != "-Werror")
    subprocess.run([cc, *flags, "-o", str(exe), str(folder / "model.c"),
                    str(folder / "driver.c"), "-lm"], check=True, capture_output=True, text=True)
    lines = [" ".join(str(int(v)) for v in (*shape, *mask)) for shape, mask in zip(shapes, allowed)]
    done = subprocess.run([str(exe), str(repeats)], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, check=True)
    values = done.stdout.split("\n")
    choices = [int(v) for v in values[:len(shapes)]]
    timing = tuple(float(v) for v in values[len(shapes)].split()) if repeats else None
    return choices, timing
