"""The Slurm backend's tunables (``c.SlurmSettings.<name>`` in the IPython config), read at each launch."""

from __future__ import annotations

from traitlets import Float, Unicode
from traitlets.config import Configurable

from nbworkers.magics.settings import settings as current_settings


class SlurmSettings(Configurable):
    """Tunables of the Slurm backend (``c.SlurmSettings.command_timeout = 60`` in the IPython config)."""

    command_timeout = Float(
        30.0, help="Seconds for one of Slurm's commands (scontrol, squeue, scancel) to answer.").tag(config=True)
    probe_timeout = Float(
        60.0, help="Seconds for the step that picks each node's free ports to run (its nodes may be busy).").tag(
        config=True)
    queued_timeout = Float(
        0.0, help="--submit: seconds to wait for the allocation to start (0: as long as it takes; Stop the cell, or"
        " interrupt it, to give up).").tag(config=True)
    queued_poll_interval = Float(
        1.0, help="--submit: seconds between looks at the queued allocation's state and reason.").tag(config=True)
    heartbeat_timeout = Float(
        120.0, help="--submit: seconds the job holding the allocation outlives its kernel's last sign of life (the"
        " kernel touches a file in the run root every tenth of it; the job ends by itself when the file is older)."
    ).tag(config=True)
    zygote_start_timeout = Float(
        30.0, help="Seconds a worker's launch waits for its node's zygote step to start and say where it listens (the "
        "worker is spawned after it; the zygote itself may still be importing).").tag(config=True)
    relay_host = Unicode(
        "", help="Address the workers' nodes use to reach the kernel's relay (default: 127.0.0.1 when every node of"
        " the allocation is this machine's loopback, else this machine's address on the route to the first node)."
    ).tag(config=True)


def slurm_settings() -> SlurmSettings:
    return SlurmSettings(config=current_settings().config)
