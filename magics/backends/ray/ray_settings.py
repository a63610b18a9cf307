"""The Ray backend's tunables (``c.RaySettings.<name>`` in the IPython config), read at each launch."""

from __future__ import annotations

from traitlets import Float, Int, List, Unicode
from traitlets.config import Configurable

from nbworkers.magics.settings import settings as current_settings


class RaySettings(Configurable):
    """Tunables of the Ray backend (``c.RaySettings.placement_timeout = 300`` in the IPython config)."""

    connect_timeout = Float(10.0, help="Seconds to wait for the Ray address to answer before giving up.").tag(
        config=True)
    placement_timeout = Float(
        60.0, help="Seconds to wait for Ray to place the worker group (enough free CPUs/GPUs/nodes)."
    ).tag(config=True)
    actor_start_timeout = Float(
        120.0, help="Seconds for the worker host actors to start on their nodes (Ray may start new processes)."
    ).tag(config=True)
    call_timeout = Float(30.0, help="Seconds to wait for an answer from a worker host actor.").tag(config=True)
    log_mirror_interval = Float(
        0.5, help="Seconds between copies of a node's new log output into the kernel's run directory."
    ).tag(config=True)
    log_mirror_chunk = Int(1 << 20, help="Bytes of a node's log copied per request.").tag(config=True)
    saved_state_max_bytes = Int(
        2**31, help="Largest session save (a worker's models, optimizers, arrays and values before a restart) copied"
        " between the kernel and a node that does not share its files, each way; a larger one stays on its node."
    ).tag(config=True)
    saved_state_copy_timeout = Float(
        300.0, help="Seconds to copy one worker's session save back from a node that does not share the kernel's"
        " files.").tag(config=True)
    poll_interval = Float(0.05, help="Seconds between checks of a worker's exit with its actor.").tag(config=True)
    unavailable_retry_interval = Float(
        0.5, help="Seconds between asks of an actor Ray calls unavailable, until Ray says whether it (or its node)"
        " died or it answers again.").tag(config=True)
    pool_idle_timeout = Float(
        600.0, help="Seconds a finished run's placement group and worker-host actors are kept, idle, for the next run "
        "of the same shape (workers, CPUs and GPUs each, --spread), which then starts its workers through those live "
        "actors (forked from each node's zygote); they hold their CPUs/GPUs meanwhile, and give way to a run of "
        "another shape or a placement group waiting for resources. 0: off (every run places its group anew)."
    ).tag(config=True)
    pool_check_interval = Float(
        5.0, help="Seconds between the idle groups' looks at the cluster: a placement group waiting for resources "
        "makes them let theirs go.").tag(config=True)
    relay_host = Unicode(
        "", help="Address the workers use to reach the kernel's relay (default: the kernel node's Ray address)."
    ).tag(config=True)
    forward_env_prefixes = List(
        Unicode(), ["TF_", "KERAS_", "NBWORKERS_"],
        help="Kernel environment variables with these prefixes are also set on the workers (besides --env).",
    ).tag(config=True)


def ray_settings() -> RaySettings:
    return RaySettings(config=current_settings().config)
