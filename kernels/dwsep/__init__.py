"""Fused depthwise-separable convolution forward (`dwsep_fwd`): its shape record (problem.py),
the operator (operator.py: tensors, GPU reference, sweeps, selection features, the vendor pair),
the NumPy reference (reference.py), the GPU reference (reference.cu) and the dwsep_chunked
family (families.py, chunked.cu)."""

from kernels.dwsep import families, operator  # noqa: F401 - they register
