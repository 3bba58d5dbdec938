"""groupnorm_bwd on a real GPU through the farm's own measuring path (farm.worker, farm.measure):
the forward's statistics and the reference against NumPy, then every instance of gn_onepass
and gn_twopass and the vendor (PyTorch) verified against the reference on the edge shapes, in
both layouts and every element type. A wrong or crashing instance fails, as does a vendor row
that is not ok; unsupported is allowed where the family's rules say so, but every shape must be
served by an instance of each family. Skipped where there is no GPU."""

import numpy as np
import pytest

from farm.gpu import list_devices
from kernels.groupnorm.problem import GroupNormProblem
from tests.gpu_verify import verify_on_edges

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not list_devices(), reason="no GPU on this machine")]

OP = "groupnorm_bwd"
EDGES = [  # (N, C, H, W, G)
    (2, 64, 7, 7, 1),        # G=1, 7x7
    (2, 32, 9, 9, 32),       # G=C: C/G=1 (H*W=81)
    (3, 96, 1, 1, 32),       # 1x1 with C/G=3
    (4, 512, 1, 1, 32),      # 1x1 with C/G=16
    (2, 128, 65, 65, 32),    # 65x65: odd H*W
    (1, 32, 512, 512, 8),    # 512x512, N=1
    (1, 36, 14, 14, 6),      # N=1; C=36 and C/G=6 not multiples of 8
    (2, 20, 5, 7, 4),        # C=20, C/G=5, H*W=35: no vector width above 1 along C/G or HW
    (4, 1280, 8, 8, 32),     # wide rows: C/vec over 32 lanes
    (33, 64, 3, 3, 16),      # N=33
]


@pytest.fixture(scope="module")
def worker():
    from farm.worker import GpuWorker
    return GpuWorker()


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_statistics_and_reference_match_numpy(worker, dtype, layout):
    """The inputs ProblemBench makes (random x, dy, gamma; mean and rstd of x from
    input_launches, rounded to the element type) and the fp32 reference outputs, read back and
    checked in float64."""
    from farm.measure import ProblemBench
    from kernels.groupnorm.gpu_check import from_storage, to_storage
    from kernels.groupnorm.reference import groupnorm_bwd, groupnorm_fwd_stats
    from kernels.operator import OUTPUT_EPS

    p = GroupNormProblem(OP, 3, 24, 5, 7, 4, layout, dtype)
    bench = ProblemBench(worker.device, p, worker.support(dtype), worker.target, worker.cache,
                         support_for=worker.support)
    try:
        def read(name, dtype, count):
            size = 4 if dtype == "fp32" else 2
            ptr = bench.references.get(name) or bench.pointers[name]
            raw = worker.device.copy_from_device(ptr, count * size)
            return from_storage(raw.view(np.float32 if size == 4 else np.uint16), dtype)

        shape = (3, 5, 7, 24) if layout == "nhwc" else (3, 24, 5, 7)
        x = read("x", dtype, p.elements).reshape(shape)
        dy = read("dy", dtype, p.elements).reshape(shape)
        gamma = read("gamma", dtype, p.C)
        mean, rstd = read("mean", "fp32", 12), read("rstd", "fp32", 12)
        for got in (mean, rstd):  # values of the element type (exact in it), kept in fp32
            np.testing.assert_array_equal(got, from_storage(to_storage(got, dtype), dtype))
        want_mean, want_rstd = groupnorm_fwd_stats(x, 4, 1e-5, layout)
        ulp = OUTPUT_EPS[dtype]  # rounded to nearest: within half a unit, plus fp32's rounding
        np.testing.assert_allclose(mean, want_mean.reshape(-1), rtol=ulp, atol=1e-7)
        np.testing.assert_allclose(rstd, want_rstd.reshape(-1), rtol=ulp)
        want = groupnorm_bwd(x, dy, gamma, mean, rstd, 4, layout)
        for name, value in zip(("dx", "dgamma", "dbeta"), want):
            got = read(name, "fp32", value.size)
            scale = np.abs(value).max()
            np.testing.assert_allclose(got, value.reshape(-1), rtol=0, atol=1e-5 * scale)
    finally:
        bench.close()


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_every_instance_and_the_vendor_are_right_on_the_edges(worker, dtype):
    problems = (GroupNormProblem(OP, *shape, layout, dtype)
                for shape in EDGES for layout in ("nhwc", "nchw"))
    failures = verify_on_edges(worker, OP, dtype, ("gn_onepass", "gn_twopass", "vendor"),
                               problems)
    assert not failures, "\n".join(failures[:40])
