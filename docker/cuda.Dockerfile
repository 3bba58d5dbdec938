# The farm's GPU image: one Ray worker per GPU (NVRTC compiles, measure actors, the vendor
# library through PyTorch). Needs the NVIDIA Container Toolkit on the host.
#   docker build -f docker/cuda.Dockerfile -t kernel-farm-cuda .
ARG CUDA_IMAGE=nvidia/cuda:12.8.0-runtime-ubuntu24.04
FROM ${CUDA_IMAGE}

ARG RAY_VERSION=2.60.0
# postgres: the workers share compiled code through the database's artifacts table
ARG FARM_EXTRAS=cuda,vendor,postgres

# Ubuntu 24.04's Python is 3.12 like the CPU image's, another patch release: Ray must compare
# major.minor only.
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor \
    FARM_CODE_CACHE=/var/cache/farm/code \
    PATH=/opt/venv/bin:$PATH

# libgomp1: LightGBM (selection models are retrained in Ray tasks on these nodes)
RUN apt-get update && apt-get install -y --no-install-recommends \
        ca-certificates python3 python3-venv libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv

COPY pyproject.toml docker/install_deps.py /tmp/farm-build/
RUN python /tmp/farm-build/install_deps.py /tmp/farm-build/pyproject.toml "$FARM_EXTRAS" \
        "ray[default]==$RAY_VERSION"

WORKDIR /opt/farm
COPY . .
RUN pip install --no-deps . && farm --help > /dev/null && ray --version

RUN useradd --create-home --uid 10001 farm \
    && mkdir -p /var/cache/farm/code && chown -R farm:farm /var/cache/farm
USER farm
