# One image per kind of machine, both with the `autosched` CLI as entrypoint:
#   cpu: the server (REST API and search engine) and CPU workers;
#   gpu: CUDA workers (with the CUDA toolkit, which TVM compiles kernels with).
# docker-compose.yml picks the target and the command of each service.

FROM python:3.11-slim AS cpu
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# XGBoost and TVM's CPU runtime use OpenMP; bubblewrap sandboxes the processes that build and run
# programs from clients (autosched.measure.sandbox); TVM links the libraries it builds with gcc.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 bubblewrap gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/autosched
COPY pyproject.toml README.md ./
COPY autosched ./autosched
COPY server ./server
COPY workers ./workers
# [models]: the server imports uploaded ONNX models and checks them against ONNX Runtime.
RUN pip install ".[models]" && useradd --create-home --uid 1000 autosched
USER autosched
WORKDIR /home/autosched
ENTRYPOINT ["autosched"]
CMD ["--help"]

FROM nvidia/cuda:12.6.3-devel-ubuntu24.04 AS gpu
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv libgomp1 bubblewrap \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv
WORKDIR /opt/autosched
COPY pyproject.toml README.md ./
COPY autosched ./autosched
COPY server ./server
COPY workers ./workers
RUN pip install . && useradd --create-home --uid 1001 autosched
USER autosched
WORKDIR /home/autosched
ENTRYPOINT ["autosched"]
CMD ["--help"]
