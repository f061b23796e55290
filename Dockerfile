# One image for every Lockstep service and the `lockstep` CLI (compose.yaml runs it five times).
#   docker build -t lockstep .
# The workspace is installed with pip, pinned by the same constraint list uv uses
# (pyproject.toml [tool.uv] constraint-dependencies), so the image runs the versions CI tests.
# BASE: any Debian-based image with Python >= 3.11 and pip; where no image registry is
# reachable, one made from Debian packages (tests/containers: mmdebstrap + podman import).
ARG BASE=python:3.12-slim
FROM ${BASE}

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1

# The Slurm adapter (LOCKSTEP_PLANNER_SCHEDULER=slurm; the updater's Slurm drain) runs squeue,
# scontrol and, to authenticate to slurmctld, munge: `--build-arg SLURM_CLIENTS=1` (compose:
# LOCKSTEP_SLURM_CLIENTS=1) adds Debian's slurm-client and munge. The cluster's slurm.conf and
# munge socket are mounted at run time (/etc/slurm, /run/munge), never baked in.
ARG SLURM_CLIENTS=0
RUN case "$SLURM_CLIENTS" in \
      1) apt-get update \
         && apt-get install -y --no-install-recommends slurm-client munge \
         && rm -rf /var/lib/apt/lists/* ;; \
      0) ;; \
      *) echo "SLURM_CLIENTS must be 0 or 1, not $SLURM_CLIENTS" >&2; exit 1 ;; \
    esac

WORKDIR /src
COPY pyproject.toml ./
COPY libs ./libs
COPY services ./services
COPY apps ./apps
RUN python -c "import tomllib; pins = tomllib.load(open('pyproject.toml', 'rb'))['tool']['uv']['constraint-dependencies']; open('/tmp/constraints.txt', 'w').write('\n'.join(pins) + '\n')" \
 && pip install --no-cache-dir -c /tmp/constraints.txt ./libs/* ./services/* ./apps/* \
 && rm -rf /src /tmp/constraints.txt

# Never root: the services need no privilege (their metrics port is unprivileged).
RUN useradd --system --uid 10001 --home-dir /var/lib/lockstep --shell /usr/sbin/nologin lockstep \
 && install -d -o lockstep -m 0700 /var/lib/lockstep
USER lockstep
WORKDIR /var/lib/lockstep

# `docker run lockstep fleet status` runs the CLI; compose starts each service as
# `python -m lockstep_<service>` (its __main__: settings from LOCKSTEP_* variables).
ENTRYPOINT ["lockstep"]
CMD ["--help"]
