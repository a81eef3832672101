# One image for every service (controller, learner, workers) of docker-compose.yml.
#   With a registry:    docker compose build                      (BASE_IMAGE: the public slim Python)
#   Without a registry: docker/build-base.sh --image              (a Debian base made by debootstrap +
#                       `docker import`, and a host-built wheelhouse: nothing is downloaded in the build)
# The classic builder builds it too (no BuildKit-only syntax): Debian's docker.io comes without buildx.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
# docker/wheelhouse/ holds wheels from docker/build-base.sh, or nothing: then pip uses the
# registries (torch from the CPU index: the default index has only the multi-GB CUDA build).
COPY docker/wheelhouse/ /wheels/
COPY pyproject.toml /app/
# the dependencies first, against empty packages and README (an editable install maps harness/ and
# trainers/ to /app, where the final stage copies the code): only a change of pyproject.toml
# reinstalls them
RUN set -eu; \
    if ls /wheels/*.whl >/dev/null 2>&1; then src="--no-index --find-links /wheels"; \
    else src="--extra-index-url https://download.pytorch.org/whl/cpu"; fi; \
    mkdir -p /app/harness /app/trainers; touch /app/README.md /app/harness/__init__.py /app/trainers/__init__.py; \
    python3 -m venv /opt/venv; \
    /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check -q $src -e /app; \
    find /opt/venv -name __pycache__ -prune -exec rm -rf {} +

FROM ${BASE_IMAGE}
# iptables: the fallback shaper's loss and NFQUEUE rules (the debootstrap base has it already)
RUN command -v iptables-restore >/dev/null || { apt-get update -q && \
    apt-get install -y -q --no-install-recommends iptables && rm -rf /var/lib/apt/lists/*; }
# the learner and the workers run as this user (docker exec -u harness); the controller is root
RUN useradd --create-home --uid 1000 harness
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md /app/
COPY netem_profiles /app/netem_profiles
COPY presets /app/presets
COPY trainers /app/trainers
COPY harness /app/harness
# provenance (meta.json git_sha, git_dirty): the commit the image's code was copied from; the image
# has no .git. docker/build-base.sh passes them; `docker compose build` takes GIT_SHA/GIT_DIRTY from
# the environment. Last, so that a new commit rebuilds only this layer.
ARG GIT_SHA=
ARG GIT_DIRTY=
ENV WAN_GIT_SHA=${GIT_SHA} WAN_GIT_DIRTY=${GIT_DIRTY}
CMD ["harness", "--help"]
