"""Run instances on one problem once each, verified, for a profiler to watch (Nsight Compute:
`ncu -k regex:NAME python3 -m bench.profile_pairs ...`); prints each pair's status and time.

    python3 -m bench.profile_pairs --op dwsep_fwd --shape N=32,C=32,H=112,W=112,K=16 \\
        --instance stream_dwsep_fwd_bf16_... [--instance ...] [--dtype bf16]
"""

from __future__ import annotations

import argparse

from farm.choices import parse_shape
from farm.timing import TimingPolicy
from kernels.registry import families_for, operator_spec

ONCE = TimingPolicy(warmup=0, min_repeats=1, max_repeats=1, flush_l2=False, timeout_s=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", required=True)
    parser.add_argument("--shape", nargs="+", required=True, help="FIELD=VALUE[,...]")
    parser.add_argument("--instance", action="append", required=True,
                        help="an instance's name, or a prefix of several")
    parser.add_argument("--dtype", default="bf16")
    args = parser.parse_args()
    from farm.worker import GpuWorker

    problem = operator_spec(args.op).problem(args.dtype, dict(parse_shape(args.shape, args.op)))
    instances = [i for f in families_for(args.op) for i in f.instances(args.op, args.dtype)
                 if any(i.name.startswith(prefix) for prefix in args.instance)]
    if not instances:
        raise SystemExit(f"no {args.op} {args.dtype} instance matches {args.instance}")
    for instance, result in GpuWorker().measure_problem(problem, instances, ONCE):
        print(f"{problem.label()}  {instance.name}  {result.status}  "
              f"{result.median_us or float('nan'):.1f} us  {result.message or ''}")


if __name__ == "__main__":
    main()
