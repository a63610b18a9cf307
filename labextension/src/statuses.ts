// Written by tools/vocabulary.py from protocol/statuses.py: edit that, then run `make labextension`.

/** Where a run is (ClusterStatus): a listing row's ``status``. */
export type RunStatus =
  | "starting"
  | "running"
  | "restarting"
  | "stopping"
  | "finished"
  | "failed"
  | "stopped"
  | "lost";

/** What a run's status reads as (LOOKS): a lost run reads as the stop it is (LOST_LABEL). */
export const STATUS_LABELS: Record<RunStatus, string> = {
  starting: "starting",
  running: "running",
  restarting: "restarting",
  stopping: "stopping",
  finished: "finished",
  failed: "failed",
  stopped: "stopped",
  lost: "stopped",
};

/** Statuses after which nothing changes any more (ENDED). */
export const ENDED: ReadonlySet<string> = new Set<RunStatus>(["finished", "failed", "stopped", "lost"]);

/** Why a run stopped when its kernel restarted or died (KERNEL_GONE): the Restart button's tooltip on such a run. */
export const KERNEL_GONE =
  "stopped because its kernel restarted or died: run the cell again (--detach keeps a run across restarts)";
