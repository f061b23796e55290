#!/usr/bin/env bash
# Lockstep admission check as a Slurm PrologSlurmctld (runs on the head node, once per job).
#
# A job names the golden stack it needs in its comment:  sbatch --comment=lockstep-stack=<hash>
# The script asks the inventory whether every allocated node runs that stack; a non-zero exit
# makes Slurm requeue (batch) or cancel (interactive) the job instead of starting it.
#
#   exit 0  admitted, or the job names no stack (set LOCKSTEP_REQUIRE_STACK=1 to refuse those)
#   exit 1  refused: a node does not conform (reasons go to the slurmctld log)
#   exit 2  bad request (malformed hash in the comment) or an error answer
#   exit 3  no answer: fail closed, unless LOCKSTEP_ADMIT_FAIL_OPEN=1 (then admitted, logged)
#
# Configuration: LOCKSTEP_NATS_URL, LOCKSTEP_NAMESPACE, LOCKSTEP_NATS_USER,
# LOCKSTEP_NATS_PASSWORD_FILE, LOCKSTEP_NATS_CA_FILE (and optional LOCKSTEP_CLI,
# LOCKSTEP_ADMIT_TIMEOUT) from the environment or /etc/lockstep/prolog.env (README.md).
set -euo pipefail
# Slurm runs prologs without a search path.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

if [[ -r /etc/lockstep/prolog.env ]]; then
  # shellcheck source=/dev/null
  set -a  # export what it sets: `lockstep fleet admit` is a child process
  . /etc/lockstep/prolog.env
  set +a
fi
LOCKSTEP_CLI=${LOCKSTEP_CLI:-lockstep}
TIMEOUT=${LOCKSTEP_ADMIT_TIMEOUT:-10}
JOB=${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run this as a Slurm prolog}

log() { logger -t lockstep-prolog -- "job ${JOB}: $*" 2>/dev/null || true; echo "lockstep-prolog: job ${JOB}: $*" >&2; }

# The comment from the prolog environment, or from the controller when this Slurm omits it.
comment=${SLURM_JOB_COMMENT-}
if [[ -z ${comment} ]]; then
  comment=$(scontrol show job "${JOB}" | sed -n 's/^ *Comment=\(.*\)$/\1/p' | head -n 1)
fi
stack=$(grep -o 'lockstep-stack=[^[:space:],]*' <<<"${comment}" | head -n 1 | cut -d= -f2 || true)
if [[ -z ${stack} ]]; then
  if [[ ${LOCKSTEP_REQUIRE_STACK:-0} == 1 ]]; then
    log "refused: no lockstep-stack=<hash> in the job comment (LOCKSTEP_REQUIRE_STACK=1)"
    exit 2
  fi
  exit 0
fi

nodes=$(scontrol show hostnames "${SLURM_JOB_NODELIST:?SLURM_JOB_NODELIST is not set}" | paste -sd, -)
rc=0
out=$("${LOCKSTEP_CLI}" fleet admit --stack-hash "${stack}" --nodes "${nodes}" \
  --timeout "${TIMEOUT}" 2>&1) || rc=$?
case ${rc} in
  0) exit 0 ;;
  3)
    if [[ ${LOCKSTEP_ADMIT_FAIL_OPEN:-0} == 1 ]]; then
      log "admitted WITHOUT a check (LOCKSTEP_ADMIT_FAIL_OPEN=1): ${out}"
      exit 0
    fi
    log "refused: inventory unavailable (fail closed): ${out}"
    exit 3
    ;;
  *)
    log "refused (lockstep exit ${rc}): ${out//$'\n'/; }"
    exit "${rc}"
    ;;
esac
