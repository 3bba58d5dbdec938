"""Group-normalization backward (the groupnorm_bwd operator to be): the NumPy reference
(reference.py), the GPU reference (reference.cu), the gn_onepass and gn_twopass families
(onepass.cu, twopass.cu) and their configs, applicability and geometry (plan.py). Nothing here
registers with kernels.registry yet. `python -m kernels.groupnorm.gpu_check` checks it all on a
GPU."""
