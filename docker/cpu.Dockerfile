# The farm's CPU image: the Ray head, the coordinator and the dashboard.
#   docker build -f docker/cpu.Dockerfile -t kernel-farm-cpu .
# Every Ray process of one cluster needs the same Ray version and Python 3.12 (see cuda.Dockerfile).
FROM python:3.12-slim

ARG RAY_VERSION=2.60.0
ARG FARM_EXTRAS=postgres

# Ray compares Python versions between nodes; the CUDA image's 3.12 is another patch release.
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor \
    FARM_CODE_CACHE=/var/cache/farm/code \
    PATH=/opt/venv/bin:$PATH

# libgomp1: LightGBM (the selection models)
RUN apt-get update && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && python -m venv /opt/venv

# Dependencies first: this layer is rebuilt only when pyproject.toml changes.
COPY pyproject.toml docker/install_deps.py /tmp/farm-build/
RUN python /tmp/farm-build/install_deps.py /tmp/farm-build/pyproject.toml "$FARM_EXTRAS" \
        "ray[default]==$RAY_VERSION"

# The package (console script `farm`; `ray` comes with ray[default]). The working directory
# keeps jobs/ (example specs, recordings) at hand.
WORKDIR /opt/farm
COPY . .
RUN pip install --no-deps . && farm --help > /dev/null && ray --version

RUN useradd --create-home --uid 10001 farm \
    && mkdir -p /var/cache/farm/code && chown -R farm:farm /var/cache/farm
USER farm
