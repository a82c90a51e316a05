# The image behind the compose stack's `trainer` (the instrumented demo job) and `dashboard`
# (the Streamlit app) services: the package with its OpenTelemetry and dashboard extras, on CPU torch.
#   docker compose build        (or: docker build -t training-telemetry:0.1.0 .)
FROM python:3.11.13-slim-bookworm

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

# The CPU build of torch first (the version constraints-cpu.txt pins), so that installing the
# package below finds torch satisfied and never pulls a CUDA build.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

WORKDIR /src
COPY pyproject.toml README.md ./
COPY telemetry ./telemetry
RUN pip install ".[otel,dashboard]" \
    && useradd --create-home --uid 10001 telemetry \
    && mkdir /runs && chown telemetry /runs

# A non-root user; /runs belongs to it, so the named volume mounted there starts writable by it.
USER telemetry
WORKDIR /runs
ENTRYPOINT ["telemetry"]
CMD ["--help"]
