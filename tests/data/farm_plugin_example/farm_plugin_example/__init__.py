"""rowsum_fwd for the kernel farm: y[r] = sum over c of x[r, c], for a rows x cols matrix in
row-major order. The shape record (problem.py), the operator (operator.py, registered through
the `kernel_farm.operators` entry point), the rowsum_thread and rowsum_lanes families
(families.py, through `kernel_farm.families`) and their source with the GPU reference
(rowsum.cu, package data)."""
