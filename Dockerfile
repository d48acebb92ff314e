# rainierd as a container: one image, the role is the command
# (run | simulate | monitor). Runs as an unprivileged user.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY rainierd ./rainierd
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
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
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9780/healthz', timeout=2)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["rainierd"]
CMD ["run"]
