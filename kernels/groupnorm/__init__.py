"""Group-normalization backward, the groupnorm_bwd operator: the shape record (problem.py), the
operator (operator.py), the gn_onepass and gn_twopass families (families.py over plan.py's
config spaces, applicability rules and launch geometry; sources onepass.cu and twopass.cu),
the GPU reference (reference.cu) and the NumPy one (reference.py).
`python -m kernels.groupnorm.gpu_check` checks every instance against NumPy on a GPU."""

from kernels.groupnorm import families, operator  # noqa: F401 - they register
