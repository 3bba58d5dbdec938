"""Every convolution instance verified against the reference on a real GPU, edges included
(skipped where there is no GPU). A wrong or crashing instance fails; unsupported is allowed,
but every shape must be served by some instance of a family other than conv_naive."""

import random
from collections import Counter

import pytest

from farm.gpu import list_devices
from farm.problems import ProblemError
from kernels.conv.problem import CONV_OPERATORS, ConvProblem
from farm.timing import TimingPolicy
from kernels import families_for

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not list_devices(), reason="no GPU on this machine")]

VERIFY_ONLY = TimingPolicy(warmup=0, min_repeats=1, max_repeats=1, flush_l2=False, timeout_s=20)
EDGES = [
    dict(N=2, C=8, K=8, G=8, H=13, W=11, R=3, S=3, pad_h=1, pad_w=1),            # C/G = 1
    dict(N=2, C=96, K=96, G=96, H=15, W=15, R=5, S=5, stride_h=2, stride_w=2, pad_h=2, pad_w=2),
    dict(N=1, C=64, K=40, G=2, H=9, W=9, R=3, S=3, pad_h=1, pad_w=1),            # K/G = 20
    dict(N=3, C=48, K=72, G=1, H=1, W=1, R=1, S=1),                              # H = W = 1
    dict(N=2, C=32, K=24, G=1, H=17, W=15, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    dict(N=2, C=32, K=32, G=4, H=12, W=12, R=3, S=3, dil_h=2, dil_w=2, pad_h=2, pad_w=2),
    dict(N=4, C=64, K=128, G=1, H=14, W=14, R=1, S=1, stride_h=2, stride_w=2),   # 1x1 stride 2
    dict(N=2, C=16, K=16, G=16, H=14, W=14, R=7, S=7, pad_h=3, pad_w=3),         # 7x7 pad 3
    dict(N=1, C=256, K=256, G=32, H=7, W=7, R=3, S=3, pad_h=1, pad_w=1),         # N = 1, g32
    dict(N=2, C=40, K=24, G=8, H=10, W=6, R=3, S=1, pad_h=1),                    # C/G 5, K/G 3
    dict(N=8, C=128, K=128, G=1, H=28, W=28, R=3, S=3, pad_h=1, pad_w=1),
]


# conv_direct's entries for stride 2 along the row (<op>_s2, forward and backward-weight):
# depthwise and grouped, every unrolled filter size, odd sizes, padding from none to FR // 2,
# windows past both edges, stride 2 along the row only
STRIDE_2 = [
    dict(N=2, C=24, K=24, G=24, H=15, W=13, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    dict(N=1, C=40, K=40, G=40, H=17, W=19, R=5, S=5, stride_h=2, stride_w=2, pad_h=2, pad_w=2),
    dict(N=2, C=16, K=16, G=16, H=14, W=15, R=7, S=7, stride_h=2, stride_w=2, pad_h=3, pad_w=3),
    dict(N=1, C=72, K=72, G=72, H=9, W=10, R=3, S=3, stride_h=2, stride_w=2),
    dict(N=2, C=8, K=8, G=8, H=3, W=3, R=5, S=5, stride_h=2, stride_w=2, pad_h=2, pad_w=2),
    dict(N=2, C=64, K=64, G=8, H=11, W=13, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    dict(N=1, C=48, K=48, G=48, H=12, W=12, R=3, S=3, stride_w=2, pad_h=1, pad_w=1),
]


def random_shapes(count, seed=7):
    rng, shapes = random.Random(seed), []
    while len(shapes) < count:
        g = rng.choice([1, 1, 2, 4, 8, "dw"])
        c = rng.choice([8, 16, 24, 32, 48, 64, 96, 128])
        g = c if g == "dw" else g
        k = c if g == c else rng.choice([8, 16, 24, 40, 64, 96])
        r = rng.choice([1, 3, 5])
        shape = dict(N=rng.choice([1, 2, 3]), C=c, K=k, G=g, H=rng.randint(1, 20),
                     W=rng.randint(1, 20), R=r, S=rng.choice([r, 1]),
                     stride_h=rng.choice([1, 2]), stride_w=rng.choice([1, 2]),
                     pad_h=rng.randint(0, r // 2), pad_w=rng.randint(0, 1),
                     dil_h=rng.choice([1, 1, 2]), dil_w=1)
        try:
            ConvProblem(op="conv2d_fwd", **shape)
        except ProblemError:
            continue
        shapes.append(shape)
    return shapes


@pytest.fixture(scope="module")
def worker():
    from farm.worker import GpuWorker
    return GpuWorker()


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("op", CONV_OPERATORS)
def test_every_instance_is_right_on_every_shape(worker, op, dtype):
    families = [f for f in families_for(op)
                if f.name not in ("conv_naive", "vendor", "conv_faulty")]
    instances = [i for f in families for i in f.instances(op, dtype)]
    failures, statuses = [], Counter()
    for shape in EDGES + random_shapes(12):
        problem = ConvProblem(op=op, dtype=dtype, **shape)
        served = False
        for instance, result in worker.measure_problem(problem, instances, VERIFY_ONLY):
            statuses[result.status] += 1
            if result.status == "ok":
                served = True
            elif result.status != "unsupported":
                failures.append(f"{instance.name} on {problem.label()}: {result.status} "
                                f"{result.message}")
        if not served and dtype != "fp32":
            failures.append(f"no instance serves {problem.label()}")
    print(op, dtype, dict(statuses))
    assert not failures, "\n".join(failures[:40])


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("op", ["conv2d_fwd", "conv2d_bwd_weight"])
def test_direct_stride_2_entry_is_right(worker, op, dtype):
    family = next(f for f in families_for(op) if f.name == "conv_direct")
    instances = family.instances(op, dtype)
    failures, ran = [], Counter()
    for shape in STRIDE_2:
        problem = ConvProblem(op=op, dtype=dtype, **shape)
        for instance, result in worker.measure_problem(problem, instances, VERIFY_ONLY):
            if result.status == "ok":
                ran[family.entry(instance, problem)] += 1
            elif result.status != "unsupported":
                failures.append(f"{instance.name} on {problem.label()}: {result.status} "
                                f"{result.message}")
    assert not failures, "\n".join(failures[:40])
    assert ran[f"{op}_s2"] >= len(STRIDE_2), ran
    print(op, dtype, dict(ran))
