# syntax=docker/dockerfile:1
# The service image: wheels are built in the first stage; the final stage has no compiler, no pip
# cache, runs as a non-root user and writes nothing to its root filesystem (run it read-only).
# BASE is the Python 3.11 image both stages start from. The test suite, which cannot pull, passes a
# stand-in for it built from Debian bookworm's packages (controlplane/images.py); users keep the default.
ARG BASE=python:3.11-slim
FROM ${BASE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
# The service only: the local control plane, the demo and the profiling tools stay in the checkout.
COPY autoscaler autoscaler
COPY inventory inventory
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${BASE}
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin objcount
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-compile /wheels/*.whl \
    && rm -rf /wheels \
    && pip uninstall --yes pip setuptools wheel
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 9464 8081
HEALTHCHECK --interval=30s --timeout=3s --start-period=20s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8081/healthz', timeout=2)"]
ENTRYPOINT ["objcount"]
CMD ["run"]
