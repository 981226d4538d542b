# One image for every role of Lethe (D1): `lethe api`, `lethe worker`, `lethe scheduler`, `lethe migrate`.
# Build stage: wheels of Lethe and its pinned dependencies. Runtime stage: a slim Python with no compilers,
# a non-root user with a fixed uid, and nothing baked in but code (configuration comes from the environment).

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY app ./app
COPY workers ./workers
COPY scheduler ./scheduler
RUN pip wheel --no-cache-dir --wheel-dir /wheels --constraint constraints.txt . \
    && sha256sum /wheels/*.whl > /wheels.sha256

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PROMETHEUS_MULTIPROC_DIR=/var/run/lethe/metrics \
    LETHE_API_HOST=0.0.0.0 \
    LETHE_FILE_FS_ROOT=/var/lib/lethe/objects
RUN groupadd --system --gid 10001 lethe \
    && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin lethe \
    && mkdir -p /var/run/lethe/metrics /var/lib/lethe/objects \
    && chown -R 10001:10001 /var/run/lethe /var/lib/lethe
# The wheels are mounted from the build stage for this one step, never copied: no layer keeps them. Their
# checksums are copied first (a few hundred bytes): a build cache that does not look into a bind mount
# (podman's) then still installs new wheels instead of reusing the layer of old ones.
COPY --from=build /wheels.sha256 /usr/local/share/lethe-wheels.sha256
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels /wheels/lethe-*.whl
USER 10001:10001
WORKDIR /var/lib/lethe
EXPOSE 8080 9191
ENTRYPOINT ["lethe"]
CMD ["api"]
