# rainierd as a container: one image, the role is the command
# (run | simulate | monitor). Runs as an unprivileged user.
FROM python:3.11-slim-bookworm AS build
# The compiled passes (rainierd/native/kernels.c) are built here, by pip: only
# this stage has a C compiler; the image takes the finished wheel.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY rainierd ./rainierd
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
# The version is the package's (rainierd/__init__.py; a test fails on drift);
# revision and created are given by the build: --build-arg REVISION=$(git
# rev-parse HEAD) --build-arg CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ).
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="rainierd" \
      org.opencontainers.image.description="Telemetry and reliability monitoring daemon for AWS Trainium2 fleets" \
      org.opencontainers.image.source="https://github.com/rainierd/rainierd" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
RUN groupadd --system --gid 10001 rainierd \
 && useradd --system --uid 10001 --gid rainierd --no-create-home --shell /usr/sbin/nologin rainierd \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/rainierd
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 10001:10001
# Inside the container's own network namespace the exporter must listen beyond
# loopback to be scraped; the port is published only where deploy/ says so.
ENV RAINIERD_LOG_FORMAT=json \
    RAINIERD_METRICS_ADDR=0.0.0.0:9780 \
    PYTHONUNBUFFERED=1
# A monitor's --state-file goes here (a volume): loss stays exact across restarts.
VOLUME ["/var/lib/rainierd"]
EXPOSE 9780
# Every role serves /healthz at RAINIERD_METRICS_ADDR (a simulator because it
# is set here); the check reads the same settings as the role, so a moved
# port, TLS or basic auth moves the probe too (rainierd/healthcheck.py).
# Its own 2 s timeout answers first, with a reason; the 5 s here also covers
# starting the command (0.75 s idle, longer beside a busy monitor).
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s \
  CMD ["rainierd", "healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["rainierd"]
CMD ["run"]
