# One image for every Lockstep service and the `lockstep` CLI (compose.yaml runs it five times).
#   docker build -t lockstep .
# The workspace is installed with pip, pinned by the same constraint list uv uses
# (pyproject.toml [tool.uv] constraint-dependencies), so the image runs the versions CI tests.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1

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
