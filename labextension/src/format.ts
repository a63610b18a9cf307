/**
 * Text the sidebar shows for a run: its age, its progress, its workers. Pure functions of a listing row.
 */
import { IRunRow } from './api';
import { ENDED, KERNEL_GONE, STATUS_LABELS } from './statuses';

// The vocabulary (statuses.ts) is written from protocol/statuses.py by tools/vocabulary.py.
export { ENDED, KERNEL_GONE };

/** What a row's status reads as (STATUS_LABELS): a lost run (its kernel is gone, its workers are being stopped)
 * reads "stopped", as it is recorded once reaped (LOST_LABEL in protocol/statuses.py). */
export function statusLabel(status: string): string {
  return STATUS_LABELS[status as keyof typeof STATUS_LABELS] ?? status;
}

/** Whether the path a kernel got for its notebook (``JPY_SESSION_NAME``: absolute, or from the server's root) is
 * the notebook open at ``openPath`` (from the server's root). */
export function sameNotebook(recorded: string, openPath: string): boolean {
  return !!recorded && !!openPath && (recorded === openPath || recorded.endsWith('/' + openPath));
}

/** Whether ``row`` is a run its kernel's restart (or death) stopped: its cell can run again in the new kernel. */
export function stoppedWithKernel(row: IRunRow): boolean {
  return isEnded(row) && !row.kernel_alive && !row.detached;
}

/** Whether running ``row`` again means running the cell that started it, in its notebook's kernel: a run its
 * kernel's restart stopped, or a --detach run that ended (its supervisor process is gone with it). */
export function rerunsItsCell(row: IRunRow): boolean {
  return isEnded(row) && !row.kernel_alive;
}

/** "train.ipynb": the notebook a run's kernel got the path of ("" when not known). */
export function notebookName(row: IRunRow): string {
  return row.notebook ? row.notebook.split('/').pop() || '' : '';
}

/** Where a run runs, for its row: its notebook (a --detach run's, whose "kernel" is its own supervisor process,
 * or the one ``notebookOf`` finds for its kernel), else its kernel, then whether that kernel is gone. */
export function whereText(row: IRunRow, notebookOfKernel: string, kernelHere: boolean): string {
  if (row.detached) {
    return notebookName(row) || 'its own process (--detach)';
  }
  const kernel = notebookOfKernel
    ? notebookOfKernel
    : row.kernel?.id
      ? `kernel ${row.kernel.id.slice(0, 8)}`
      : `kernel pid ${row.kernel?.pid ?? '?'}`;
  // a kernel that restarted keeps its id (its notebook is still open): only a kernel this server lost is gone
  const gone = row.kernel_alive ? '' : kernelHere ? ' (kernel restarted)' : ' (gone)';
  return `${kernel}${gone}`;
}

export function isEnded(row: IRunRow): boolean {
  return ENDED.has(row.status);
}

/** "4 s", "12 min", "3 h", "2 d": how long ago ``since`` (Unix seconds) was. */
export function age(since: number | null, now: number = Date.now() / 1000): string {
  if (since === null || since === undefined) {
    return '';
  }
  const seconds = Math.max(0, now - since);
  if (seconds < 90) {
    return `${Math.round(seconds)} s`;
  }
  if (seconds < 90 * 60) {
    return `${Math.round(seconds / 60)} min`;
  }
  if (seconds < 36 * 3600) {
    return `${Math.round(seconds / 3600)} h`;
  }
  return `${Math.round(seconds / 86400)} d`;
}

/** "epoch 2/3 · step 14/30", or "step 120" when no totals are known; "" before any progress. */
export function progressText(row: IRunRow): string {
  const p = row.progress;
  if (!p) {
    return '';
  }
  const parts: string[] = [];
  if (p.epoch !== null && p.epoch !== undefined) {
    parts.push(`epoch ${p.epoch}${p.epochs_total ? '/' + p.epochs_total : ''}`);
  }
  if (p.step !== null && p.step !== undefined) {
    parts.push(`step ${p.step}${p.steps_total ? '/' + p.steps_total : ''}`);
  }
  return parts.join(' · ');
}

/** Percent of the run done (0..100), or null when its totals are not known. */
export function percent(row: IRunRow): number | null {
  const fraction = row.progress ? row.progress.fraction : null;
  if (fraction === null || fraction === undefined) {
    return null;
  }
  return Math.max(0, Math.min(100, Math.round(fraction * 100)));
}

/** "12 steps/s" while the run goes on ("" once it ended: a rate is not shown as if live). */
export function rate(row: IRunRow): string {
  const value = isEnded(row) ? null : row.steps_per_sec;
  if (value === null || value === undefined || !isFinite(value)) {
    return '';
  }
  return `${value >= 10 ? value.toFixed(0) : value.toFixed(1)} steps/s`;
}

/** "local · 1 node", "ray · 3 nodes". */
export function placement(row: IRunRow): string {
  const nodes = (row.nodes || []).length;
  return `${row.backend || 'local'}${nodes ? ` · ${nodes} node${nodes === 1 ? '' : 's'}` : ''}`;
}

/** "2/2 alive", with the restarts when there were some. */
export function workersText(row: IRunRow): string {
  const restarts = row.restarts ? ` · ${row.restarts} restart${row.restarts === 1 ? '' : 's'}` : '';
  return `${row.workers_alive}/${row.workers} workers alive${restarts}`;
}

/**
 * What the tab's caption (and the browser's hover text) says: the running runs and their progress,
 * e.g. "nbworkers: train 45%, eval running"; "nbworkers: no run running" when none runs.
 */
export function summary(rows: IRunRow[]): string {
  const live = rows.filter(row => !isEnded(row));
  if (!live.length) {
    return 'nbworkers: no run running';
  }
  const parts = live.map(row => {
    const done = percent(row);
    return `${row.name} ${done === null ? row.status : done + '%'}`;
  });
  return `nbworkers: ${parts.join(', ')}`;
}

/** A row's isolation badge: "namespace" or "off", why as its tooltip (Ray's TLS too, on a Ray run); null when the
 * run recorded none (an older nbworkers). The widget's header says the same (magics/views/widget_header.js). */
export function isolationBadge(row: IRunRow): { text: string; title: string } | null {
  const fact = row.isolation;
  if (!fact || !fact.mode) {
    return null;
  }
  const why =
    fact.mode === 'namespace'
      ? "isolated: the run's workers are in a private network namespace, only they reach their TensorFlow ports"
      : `not isolated: ${fact.reason || 'no reason recorded'}`;
  const tls = fact.ray_tls ? `; Ray's TLS: ${fact.ray_tls}` : '';
  return { text: fact.mode, title: `${why}${tls}` };
}
