# syntax=docker/dockerfile:1
# The one omnium image: every Deployment in deploy/kubernetes/ runs `python -m omnium_<name>`
# from it. The install steps are deploy/image/install.sh; `make image` (deploy/image/build.sh)
# downloads the pinned wheels into deploy/image/wheels and builds it with podman, tagged with
# the version, on a Debian bookworm base of its own where no registry can be reached:
#
#   make image                                      # prints localhost/omnium:<version>
#   OMNIUM_IMAGE_BASE=python:3.11-slim-bookworm@sha256:... make image   # where one can
#
# Any base with Python 3.11+ as python3 (and the venv module) will do. The digest below was
# read from public Dockerfiles, not pulled here: check it before the first release.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

# -- build: the production venv, and the contracts made by grpcio-tools in a venv of its own ----
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_INDEX=1 \
    PIP_FIND_LINKS=/src/deploy/image/wheels
WORKDIR /src
# The locked wheels, downloaded by build.sh with their hashes: the build reaches no index.
COPY deploy/image/wheels deploy/image/wheels
COPY deploy/image/install.sh deploy/image/install.sh
COPY requirements/runtime.txt requirements/build.txt requirements/
# grpcio-tools stays in /opt/build-venv, which the last stage never copies.
RUN deploy/image/install.sh venv /opt/build-venv requirements/build.txt
RUN deploy/image/install.sh venv /opt/venv requirements/runtime.txt
COPY protos protos
RUN deploy/image/install.sh contracts /opt/build-venv/bin/python /src /opt/omnium/libs/omnium_contract
COPY libs libs
COPY services services
COPY sports sports
COPY providers providers
RUN deploy/image/install.sh app /src /opt/omnium /opt/venv

# -- production: the runtime venv and the sources, run as a user without a login ---------------
FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 omnium \
 && useradd --system --uid 10001 --gid omnium --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin omnium
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/omnium /opt/omnium
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OMNIUM_BIND_HOST=0.0.0.0 \
    OMNIUM_ENVIRONMENT=production
WORKDIR /opt/omnium
# Numeric, so Kubernetes' runAsNonRoot can check it without reading /etc/passwd.
USER 10001:10001
# Each Deployment names its own process; this one answers `docker run omnium` with the gateway.
CMD ["python", "-m", "omnium_gateway"]
