"""Every tunable of the kernel side in one traitlets Configurable.

Set them from Jupyter/IPython config (``c.WorkerSettings.stop_grace = 10``) or at run time
(``nbworkers.settings().stop_grace = 10``). Every timeout, limit and interval the kernel side uses is named here,
except two groups that have their own Configurable because they are read elsewhere and configured apart:
``RaySettings`` (``magics/backends/ray/backend.py``: only with ``--backend ray``, ``c.RaySettings.*``) and
``NbworkersAPI`` (``extension/serverext.py``: the REST API runs in the Jupyter server's process, configured by
``jupyter_server_config``; its defaults come from here). The hosts and workers read theirs from the environment:
``protocol/env_settings.py``. What stays a module constant is fixed by a format or a protocol (exit codes, frame
counts, sizes both sides check), a layout of a rendering, or the step of an internal poll loop.
"""

from __future__ import annotations

from pathlib import Path

from traitlets import Bool, Enum, Float, Int, Unicode, default
from traitlets.config import Configurable

from nbworkers.protocol import env_settings
from nbworkers.protocol.lines import DEFAULT_TAIL_LINES


class WorkerSettings(Configurable):
    run_root = Unicode(help="Where run directories (per-worker logs, cell code, state) are written.").tag(
        config=True
    )
    detach = Bool(False, help="Default of %%worker --detach: a plain run's loop, or a new session, in a supervisor "
                  "process of its own that outlives the kernel (magics/run/detach/, magics/sessions/detach/); stop it "
                  "with `%workers stop NAME`.").tag(
        config=True
    )
    flush_interval = Float(0.25, help="Seconds between updates of a cluster's output (at most 4 a second).").tag(
        config=True
    )
    poll_interval = Float(0.05, help="Seconds the supervisor waits for relay traffic before checking processes.").tag(
        config=True
    )
    stop_grace = Float(5.0, help="Seconds between SIGTERM and SIGKILL when a worker group is stopped.").tag(
        config=True
    )
    stop_kill_margin = Float(2.0, help="Seconds beyond stop_grace the supervisor waits for a stopped group's hosts "
                             "to exit before it kills their process groups itself.").tag(config=True)
    stop_wait_margin = Float(5.0, help="Seconds beyond stop_grace that `%workers stop` (and the REST API's DELETE) "
                             "wait for a group to end.").tag(config=True)
    exit_stop_margin = Float(3.0, help="Seconds beyond stop_grace a kernel that shuts down waits for each of its "
                             "clusters to stop.").tag(config=True)
    relay_drain_time = Float(0.3, help="Seconds the supervisor keeps reading the relay after a group ended, for the "
                             "hosts' last log lines and exit codes.").tag(config=True)
    relay_drain_poll = Float(0.05, help="Seconds one read of that drain waits for a message.").tag(config=True)
    port_retries = Int(3, help="Relaunches of a group whose TensorFlow server could not bind its port.").tag(
        config=True
    )
    max_restarts = Int(3, help="Group restarts after retryable failures (crash, OOM, preemption, stall); "
                       "--max-restarts.").tag(config=True)
    restart_backoff = Float(0.25, help="Seconds before the first restart; doubles with each further restart (the "
                            "restart limit and 'the same error twice is permanent' stop crash loops).").tag(
        config=True
    )
    restart_backoff_max = Float(30.0, help="The longest wait before a restart, in seconds.").tag(config=True)
    elastic_check_interval = Float(10.0, help="Seconds between an elastic run's looks at its cluster while it runs "
                                   "fewer workers than -n (--min-workers): room for more restarts it bigger.").tag(
        config=True
    )
    stall_timeout = Float(1800.0, help="Seconds without any progress (logs, metrics) before the watchdog acts; "
                          "0: off.").tag(config=True)
    stack_dump_wait = Float(3.0, help="Seconds the watchdog gives workers to write their stacks before acting.").tag(
        config=True
    )
    evaluator_grace = Float(60.0, help="Seconds the evaluator may keep running after training ended before it is "
                            "stopped.").tag(config=True)
    log_tail_lines = Int(DEFAULT_TAIL_LINES, help="Log lines per worker kept in the kernel and shown; the full log is "
                         "on disk.").tag(config=True)
    python_check_timeout = Float(60.0, help="Seconds allowed to check that a --python interpreter can run "
                                 "workers.").tag(config=True)
    nvidia_smi_timeout = Float(10.0, help="Seconds `nvidia-smi -L` may take to list the GPUs the workers share "
                               "(then none are assumed).").tag(config=True)
    stop_settle_timeout = Float(3.0, help="Seconds `%workers stop` (or the REST API's DELETE), having killed a run's "
                                "processes itself, gives the run's live kernel to record the end.").tag(config=True)
    state_file_interval = Float(1.0, help="Seconds between writes of a running cluster's state.json.").tag(config=True)
    # zygotes (magics/backends/zygotes.py): fork workers from a process that imported TensorFlow once
    zygote = Bool(True, help="Fork local workers from a zygote (one per interpreter and import-time environment) "
                  "that imported TensorFlow once; False: spawn every worker. Default: $NBWORKERS_ZYGOTE or on.").tag(
                      config=True)
    zygotes_max = Int(2, help="Most zygotes kept at once (each holds one TensorFlow import's memory); the "
                      "oldest is stopped.").tag(config=True)
    zygote_fork_timeout = Float(120.0, help="Seconds a worker's host waits for its zygote's fork (a new zygote "
                                "imports TensorFlow first) before it spawns the worker instead.").tag(config=True)
    zygote_connect_timeout = Float(15.0, help="Seconds a worker's host retries connecting to a zygote that has not "
                                   "bound its socket yet before it spawns the worker instead.").tag(config=True)
    zygote_prewarm = Bool(True, help="Start this kernel's zygote when the extension loads, so the first %%worker "
                          "cell forks instead of waiting for TensorFlow's import (it holds one TensorFlow import's "
                          "memory until zygote_idle_timeout). Default: $NBWORKERS_ZYGOTE_PREWARM or on.").tag(
                              config=True)
    zygote_idle_timeout = Float(900.0, help="Seconds a zygote with no running worker and no fork waits before it "
                                "exits (its memory freed; the next run starts a new one); 0: never.").tag(config=True)
    zygote_stop_timeout = Float(3.0, help="Seconds a zygote gets to exit after its pipe is closed before SIGKILL.").tag(
        config=True)
    # isolation (magics/backends/isolation.py, protocol/private/netns.py): local workers in a private network namespace
    isolation = Enum(["auto", "required", "off"], default_value="auto", help="Local runs' workers share a private "
                     "network namespace (their TensorFlow servers reachable by the run alone): 'auto' when this "
                     "machine allows it (else said once, and they run as before), 'required' (a launch without it is "
                     "refused), 'off'. Default: $NBWORKERS_ISOLATION or auto.").tag(config=True)
    isolation_start_timeout = Float(10.0, help="Seconds a launch waits for its run's namespace holder to make the "
                                    "namespace.").tag(config=True)
    widget = Bool(True, help="Show the live widget (else only the text/HTML view).").tag(config=True)
    widget_line_chars = Int(2000, help="Longest log line the widget shows; the rest is cut (the kernel's log tail "
                            "and the log file keep more).").tag(config=True)
    widget_chart_points = Int(300, help="Points per worker and metric the widget's charts keep (older history is "
                              "merged by step).").tag(config=True)
    widget_compact_workers = Int(8, help="From this many workers on, the widget and the text/HTML summary show the "
                                 "compact view: one row per worker (stragglers first), the chief's curve in a "
                                 "min-max band with only the outliers as lines, logs of the chief and of workers "
                                 "with errors or warnings.").tag(config=True)
    # sessions (magics/sessions/session.py): %%worker --session NAME, workers that keep their state between cells
    session_peer_grace = Float(2.0, help="Seconds the other workers get to end a session cell after one worker's "
                               "cell raised, before their collectives are aborted.").tag(config=True)
    session_abort_grace = Float(5.0, help="Seconds workers get to end a cell after an abort (or a Stop) before the "
                                "session restarts its processes (their state is lost).").tag(config=True)
    session_save_wait = Float(120.0, help="Seconds the workers of a session get to save their state (models, "
                              "variables, arrays) before any restart of its processes (an error, a worker killed, the "
                              "second Stop, Restart) goes on anyway; those still saving then lose theirs.").tag(
                                  config=True)
    session_interrupt_grace = Float(10.0, help="Seconds a Stop (KeyboardInterrupt) gets to end a session cell on "
                                    "every worker before the session restarts its processes.").tag(config=True)
    session_pause_wait = Float(1.0, help="Seconds a Stop waits for every worker of a session cell to pause at a "
                               "training step (then all stop at the same step; none paused: KeyboardInterrupt).").tag(
                                   config=True)
    session_interrupt_wait = Float(10.0, help="Seconds the notebook's interrupt (■) during a blocking wait for a "
                                   "session cell waits for the Stop it sends to end the cell on every worker.").tag(
                                       config=True)
    session_restart_wait = Float(120.0, help="Seconds a session cell's view waits, after its Restart button, for the "
                                 "restarted workers, to show their new pids and what the restart lost.").tag(
                                     config=True)
    pull_timeout = Float(120.0, help="Seconds Session.pull waits for a worker's reply.").tag(config=True)
    pull_max_bytes = Int(256 * 2**20, help="Largest value (bytes of array data) Session.pull accepts.").tag(config=True)
    push_max_bytes = Int(2**30, help="Largest value (bytes of array or pickled data) Session.push or scatter sends to "
                         "one worker.").tag(config=True)
    shm_min_bytes = Int(2**20, help="A local session's push or pull of at least this many bytes of arrays goes "
                        "through a private shared-memory file instead of the socket (Ray: always the socket).").tag(
                            config=True)
    data_receive_hwm = Int(2, help="Pull replies (each up to pull_max_bytes) queued per worker in the kernel before "
                           "the worker waits.").tag(config=True)
    # what a blocking wait leaves in the cell, and how the widget notices a dead kernel
    echo_lines = Int(200, help="Lines per worker a blocking wait (--block, %workers wait) writes into the cell as "
                     "they come, prefixed [i]; then only a count, and the last echo_tail_lines at the end. "
                     "0: none.").tag(config=True)
    echo_tail_lines = Int(40, help="Last lines per worker shown when a blocking wait ends, if its output was cut.").tag(
        config=True)
    echo_line_chars = Int(1000, help="Longest line a blocking wait writes into the cell; the rest is cut (noted).").tag(
        config=True)
    echo_traceback_hold = Float(3.0, help="Seconds a blocking wait holds back a worker's traceback while that worker "
                                "has not failed (a failed worker's traceback is shown once, in the run's error; one "
                                "it logged and went on from is written after this).").tag(config=True)
    echo_dedupe_hold = Float(2.0, help="Seconds a blocking wait holds a line of worker 1..N-1 back, waiting for "
                             "worker 0 to print the same line (then it is not shown: the cell shows worker 0's output, "
                             "the others' lines only where they differ).").tag(config=True)
    echo_all_workers = Bool(False, help="A blocking wait writes every worker's lines into the cell, not only worker "
                            "0's and the others' where they differ.").tag(config=True)
    display_max_bytes = Int(4 * 2**20, help="Largest rich output (a MIME bundle from display(), plt.show() or a "
                            "cell's last expression, bytes of JSON) a session worker sends and the kernel accepts; "
                            "bigger ones are dropped and counted.").tag(config=True)
    display_max_outputs = Int(50, help="Rich outputs (display(), plt.show()) one session cell keeps and shows; the "
                              "rest are dropped and counted.").tag(config=True)
    tensorboard_start_timeout = Float(90.0, help="Seconds `%workers tensorboard NAME` waits for TensorBoard to "
                                      "serve.").tag(config=True)
    tensorboard_reload_interval = Float(5.0, help="Seconds between TensorBoard's reads of new event files.").tag(
        config=True)
    # every limit on what workers (or anyone who reaches the relay) can make the kernel hold
    relay_max_message_bytes = Int(8 * 2**20, help="Largest relay message (bytes) the kernel accepts; a bigger frame "
                                  "closes the sender's connection.").tag(
                                      config=True)
    relay_receive_hwm = Int(100, help="Relay messages queued per sender in the kernel before senders wait.").tag(
        config=True)
    relay_replay_history = Int(65536, help="Signatures the relay remembers to refuse replayed messages.").tag(
        config=True)
    max_line_chars = Int(env_settings.MAX_LINE_CHARS.default, help="Longest output line kept in the kernel, the "
                         "widget and state.json; the "
                         "rest is cut (noted); the log file on disk keeps it all.").tag(config=True)
    max_workers = Int(64, help="Largest -n (plus --ps/--chief/--evaluator tasks) a %%worker run may ask for.").tag(
        config=True)

    # The defaults environment variables give (protocol/env_settings.py: a bad value warns and uses the default)
    @default("zygote")
    def _default_zygote(self) -> bool:
        return env_settings.ZYGOTE.get()

    @default("zygote_prewarm")
    def _default_zygote_prewarm(self) -> bool:
        return env_settings.ZYGOTE_PREWARM.get()

    @default("isolation")
    def _default_isolation(self) -> str:
        return env_settings.ISOLATION.get()

    @default("run_root")
    def _default_run_root(self) -> str:
        return str(Path(env_settings.RUN_ROOT.get()).expanduser())


_settings: WorkerSettings | None = None


def settings() -> WorkerSettings:
    """The process-wide settings (configured from the IPython config when the extension loads)."""
    global _settings
    if _settings is None:
        _settings = WorkerSettings()
    return _settings


def configure(config) -> WorkerSettings:
    global _settings
    _settings = WorkerSettings(config=config)
    return _settings
