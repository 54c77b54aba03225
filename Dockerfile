# syntax=docker/dockerfile:1
# The sidecar image: the project's own wheel in a virtual environment, on a slim Python base.
#
#   docker build -t agent-sidecar:0.1.0 .
#   docker run --rm -p 8080:8080 -p 9477:9477 agent-sidecar:0.1.0 \
#     --listen 0.0.0.0:8080 --admin-listen 0.0.0.0:9477
#
# The base is pinned to an exact release tag (bump it with each release; pin its digest in the
# pipeline that pushes the image). Every dependency installs from a binary wheel: the build
# stage compiles nothing and the final stage has no compiler, no pip and no package manager run.
ARG PYTHON_IMAGE=python:3.13.16-slim-bookworm
# The version in pyproject.toml (a test keeps them equal).
ARG VERSION=0.1.0

FROM ${PYTHON_IMAGE} AS build
ARG VERSION
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY sidecar ./sidecar
# The project's wheel and its dependencies' wheels, then a venv without pip holding them.
RUN pip wheel --only-binary=:all: --wheel-dir /wheels . \
 && python -m venv --without-pip /opt/sidecar \
 && pip --python /opt/sidecar/bin/python install --no-index --find-links /wheels "sidecar==${VERSION}"

FROM ${PYTHON_IMAGE}
ARG VERSION
LABEL org.opencontainers.image.title="agent-sidecar" \
      org.opencontainers.image.description="Policy-and-observability sidecar proxy for LLM agents" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# pip is not needed at run time: nothing is installed into a running container.
RUN python -m pip uninstall --yes pip
COPY --from=build /opt/sidecar /opt/sidecar
# Bytecode was compiled at install time: nothing writes to the (read-only) root filesystem.
ENV PATH=/opt/sidecar/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
# Proxy, admin (/healthz, /readyz, /metrics, /approvals).
EXPOSE 8080 9477
# For docker run; Kubernetes ignores it and uses the chart's probes. Admin port at its default.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:9477/healthz', timeout=2).status != 200)"]
ENTRYPOINT ["sidecar", "run"]
