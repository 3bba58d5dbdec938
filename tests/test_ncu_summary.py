"""bench/ncu_summary.py reads Nsight Compute's text report: one record per launch, its units
converted, the first stall the report names."""

from bench.ncu_summary import launches

REPORT = """==PROF== Connected to process 1
  conv2d_fwd (392, 1, 1)x(128, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    Memory Throughput                 %        55.87
    Duration                         us        32.16
    Compute (SM) Throughput           %        44.48
    Executed Ipc Active   inst/cycle         1.96
    Registers Per Thread             register/thread             164
    Achieved Occupancy                        %        17.11
  sm90_xmma_fprop (15, 8, 1)x(384, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Duration                         ms         1,020.50
    Warp Cycles Per Issued Instruction             cycle        14.82
          On average, each warp of this workload spends 4.8 cycles being stalled waiting for a
          On average, each warp of this workload spends 9.9 cycles being stalled on a barrier
"""


def test_each_launch_with_its_figures():
    ours, vendor = launches(REPORT)
    assert ours["kernel"] == "conv2d_fwd" and ours["grid"] == [392, 1, 1]
    assert ours["block"] == [128, 1, 1] and ours["duration_us"] == 32.16
    assert ours["registers"] == 164 and ours["sm_throughput_pct"] == 44.48
    assert ours["ipc_active"] == 1.96 and "largest_stall" not in ours
    assert vendor["duration_us"] == 1_020_500.0  # ms, thousands separated
    assert vendor["cycles_per_issue"] == 14.82
    assert vendor["largest_stall"]["cycles"] == 4.8  # the first one named
