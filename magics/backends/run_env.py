"""The per-run part of a worker's environment, and what is left without it (what a zygote is started with).

A zygote (``zygotes``) imports TensorFlow before any run exists: it gets a worker's environment minus the
variables that differ from run to run or worker to worker; its forked children are handed those.
"""

from __future__ import annotations

from nbworkers.magics.frameworks import registry as frameworks
from nbworkers.procs.ownership import RUN_ID_ENV, ZYGOTE_MARKER_ENV
from nbworkers.protocol import session_wire, wire

# Variables that differ from run to run (or worker to worker): never part of a zygote's environment or key; and
# the frameworks' variables (TF_CONFIG: magics/frameworks/).
PER_RUN_VARIABLES = frozenset({
    wire.ENV_RELAY, wire.ENV_KEY, wire.ENV_CLUSTER, wire.ENV_WORKER, wire.ENV_GENERATION,
    wire.ENV_RUN_DIR, wire.ENV_CODE, wire.ENV_PUSH, wire.ENV_CWD, wire.ENV_CELL_SCAN, RUN_ID_ENV,
    session_wire.ENV_SESSION, session_wire.ENV_COMMANDS,
})


def base_env(env: dict[str, str]) -> dict[str, str]:
    """A worker's environment without the per-run variables (and without the zygote marker)."""
    per_run = PER_RUN_VARIABLES | frameworks.variables()
    return {k: v for k, v in env.items() if k not in per_run and k != ZYGOTE_MARKER_ENV}
