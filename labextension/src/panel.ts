/**
 * The sidebar: every run and session under the run root, of every kernel, polled from the REST API.
 *
 * Rows are keyed by run name and updated in place (a click is never lost to a re-render). Stop, Restart and
 * Remove call the REST API; the log, TensorBoard and attach go through the callbacks the plugin gives
 * (they need the shell or a notebook).
 */
import { Widget } from '@lumino/widgets';

import { ClustersAPI, IRunRow } from './api';
import {
  age,
  isEnded,
  isolationBadge,
  KERNEL_GONE,
  percent,
  placement,
  progressText,
  rate,
  rerunsItsCell,
  statusLabel,
  stoppedWithKernel,
  summary,
  whereText,
  workersText
} from './format';

/** What a row's buttons do beyond the REST API. */
export interface IRowActions {
  openLog(row: IRunRow): void;
  tensorboard(row: IRunRow): Promise<void>;
  attach(row: IRunRow): Promise<void>;
  /** Run an ended run again in its own kernel (``.restart()`` there); the kernel must be one of this server's. */
  restartEnded(row: IRunRow): Promise<void>;
  /** Run the notebook cell that started the run again, in its notebook's current kernel (its kernel restarted). */
  rerunCell(row: IRunRow): Promise<void>;
  /** Why that cannot be done now ("" when it can): the notebook is not open, the cell is gone. */
  rerunBlocked(row: IRunRow): string;
  /** The open notebook ``rerunCell`` runs the cell in ("" when none). */
  notebookName(row: IRunRow): string;
  /** The notebook a kernel serves on this server ("" when none does). */
  notebookOf(kernelId: string): string;
  /** Whether the kernel is one of this server's running kernels. */
  kernelHere(kernelId: string): boolean;
}

export interface IPanelOptions {
  api: ClustersAPI;
  actions: IRowActions;
  pollVisibleMs?: number; // how often the listing is fetched while the sidebar shows
  pollHiddenMs?: number; // and while it is hidden (the tab's caption still shows progress)
}

type Action = 'stop' | 'restart' | 'log' | 'tensorboard' | 'attach' | 'remove';

const RESTART_TITLE = 'Stop the group and start it again on fresh ports (an ended run: run it again)';
const RERUN_LABEL = 'Run again'; // the Restart button of a run its kernel's restart stopped
const BUTTONS: [Action, string, string][] = [
  ['stop', 'Stop', 'Stop the run (TERM, grace, KILL), even while its kernel is busy'],
  ['restart', 'Restart', RESTART_TITLE],
  ['log', 'Log', "Open the workers' logs"],
  ['tensorboard', 'TensorBoard', 'Insert and run %workers tensorboard NAME in the current notebook'],
  ['attach', 'Attach', 'Insert and run %workers attach NAME in the current notebook'],
  ['remove', 'Remove', "Remove the ended run's directory (logs, state, TensorBoard files)"]
];

/** Why a row's Restart is greyed out (its tooltip then says so, not what the button would do). */
function restartRefused(row: IRunRow): string {
  if (row.stop_requested && !isEnded(row)) {
    return 'Stopping: Restart comes back once it stopped';
  }
  return "Not from here: its kernel is not one of this server's. Run its cell again in its notebook";
}

function capitalize(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

function div(className: string, parent: HTMLElement): HTMLDivElement {
  const node = document.createElement('div');
  node.className = className;
  parent.appendChild(node);
  return node;
}

class RowView {
  readonly node: HTMLDivElement;
  private parts: Record<string, HTMLElement> = {};
  private buttons = new Map<Action, HTMLButtonElement>();
  private busy = new Set<Action>();
  row: IRunRow;

  constructor(
    row: IRunRow,
    private panel: ClustersPanel
  ) {
    this.row = row;
    this.node = document.createElement('div');
    this.node.className = 'nbw-sb-row';
    const head = div('nbw-sb-head', this.node);
    for (const part of ['name', 'status', 'isolation', 'age']) {
      this.parts[part] = div(`nbw-sb-${part}`, head);
    }
    const where = div('nbw-sb-where', this.node);
    this.parts.marks = where;
    for (const mark of ['session', 'detached']) {
      this.parts[mark] = div(`nbw-sb-mark nbw-sb-mark-${mark}`, where);
      this.parts[mark].textContent = mark;
    }
    this.parts.session.title = 'An interactive session (%%worker --session): its cells run in the same processes';
    this.parts.detached.title = "Started with --detach: it goes on when its notebook's kernel restarts or dies";
    this.parts.where = div('nbw-sb-where-text', where);
    this.parts.bar = div('nbw-sb-bar', this.node);
    this.parts.fill = div('nbw-sb-fill', this.parts.bar);
    this.parts.progress = div('nbw-sb-progress', this.node);
    this.parts.workers = div('nbw-sb-workers', this.node);
    this.parts.message = div('nbw-sb-message', this.node);
    const actions = div('nbw-sb-actions', this.node);
    for (const [action, label, title] of BUTTONS) {
      const button = document.createElement('button');
      button.className = `jp-Button nbw-sb-button nbw-sb-${action}`;
      button.dataset.action = action;
      button.textContent = label;
      button.title = title;
      button.addEventListener('click', () => void this.run(action));
      actions.appendChild(button);
      this.buttons.set(action, button);
    }
    this.update(row);
  }

  update(row: IRunRow): void {
    this.row = row;
    const ended = isEnded(row);
    const node = this.node;
    node.dataset.name = row.name;
    node.dataset.status = row.status;
    node.dataset.step = String(row.progress?.step ?? '');
    node.dataset.progress = progressText(row);
    this.parts.name.textContent = row.name; // "session" and "detached" are marks under it: the name is never cut
    this.parts.name.title = row.session ? `${row.name} (session)` : row.name;
    this.showMark('session', !!row.session);
    this.showMark('detached', !!row.detached);
    this.parts.status.textContent = statusLabel(row.status);
    this.parts.status.className = `nbw-sb-status nbw-sb-status-${row.status}`; // colour: statuses.css
    const isolation = isolationBadge(row);
    this.parts.isolation.textContent = isolation ? isolation.text : '';
    this.parts.isolation.title = isolation ? isolation.title : '';
    this.parts.isolation.dataset.mode = row.isolation?.mode || '';
    this.parts.isolation.style.display = isolation ? '' : 'none';
    this.parts.age.textContent = age(row.started);
    this.parts.age.title = row.started ? new Date(row.started * 1000).toLocaleString() : '';
    const kernelId = row.kernel?.id || '';
    const here = this.panel.actions.kernelHere(kernelId);
    this.parts.where.textContent = `${whereText(row, this.panel.actions.notebookOf(kernelId), here)} · ${placement(row)}`;
    this.parts.where.title = row.nodes && row.nodes.length ? `nodes: ${row.nodes.join(', ')}` : '';
    const done = percent(row);
    // a bar when the share done is known; a faint full bar while a run without totals runs; none after it
    this.parts.bar.style.visibility = done === null && ended ? 'hidden' : 'visible';
    this.parts.fill.style.width = `${done === null ? 100 : done}%`;
    this.parts.fill.classList.toggle('nbw-sb-fill-unknown', done === null);
    const session = row.session
      ? `${row.session.cells} cell${row.session.cells === 1 ? '' : 's'}, ${row.session.state}`
      : '';
    this.parts.progress.textContent =
      [progressText(row), rate(row), session].filter(Boolean).join(' · ') || '\u00a0';
    this.parts.workers.textContent = workersText(row);
    if (row.error && !this.parts.message.dataset.local) {
      this.parts.message.textContent = row.error;
    } else if (!this.parts.message.dataset.local) {
      this.parts.message.textContent = '';
    }
    // a run its kernel's restart stopped (or an ended --detach run): its Restart runs the cell that started it in
    // the notebook's kernel
    const rerun = rerunsItsCell(row);
    const blocked = !rerun
      ? ''
      : row.processes_alive > 0
        ? 'its workers are still being stopped (a moment)'
        : this.panel.actions.rerunBlocked(row);
    const can: Record<Action, boolean> = {
      stop: !ended || row.processes_alive > 0,
      restart: rerun
        ? !blocked
        : row.kernel_alive &&
          (ended ? this.panel.actions.kernelHere(row.kernel?.id || '') : !row.stop_requested),
      log: row.workers > 0,
      tensorboard: true,
      attach: true,
      remove: ended && row.processes_alive === 0
    };
    // five buttons on one line: Stop while the run (or its processes) lives, Remove once it ended
    const shown: Partial<Record<Action, boolean>> = { stop: can.stop, remove: ended };
    for (const [action, button] of this.buttons) {
      button.disabled = !can[action] || this.busy.has(action);
      button.style.display = shown[action] === false ? 'none' : '';
    }
    // an ended run of a kernel that restarted or died: the new kernel does not hold it, the cell starts it again
    const restart = this.buttons.get('restart');
    if (restart) {
      restart.textContent = rerun ? RERUN_LABEL : 'Restart';
      const ended = stoppedWithKernel(row) ? capitalize(KERNEL_GONE) : 'It ended with its supervisor process';
      restart.title = rerun
        ? blocked
          ? `${ended}. Not from here: ${blocked}`
          : `Run the cell that started it again in ${this.panel.actions.notebookName(row)} (its kernel now)`
        : can.restart
          ? RESTART_TITLE
          : restartRefused(row);
    }
  }

  /** A mark before where the run runs, in the row while it applies (out of it, and of its text, when not). */
  private showMark(mark: string, on: boolean): void {
    const node = this.parts[mark];
    if (on && !node.parentNode) {
      this.parts.marks.insertBefore(node, this.parts.where);
    } else if (!on && node.parentNode) {
      node.remove();
    }
  }

  private say(text: string): void {
    this.parts.message.textContent = text;
    this.parts.message.dataset.local = text ? '1' : '';
  }

  private async run(action: Action): Promise<void> {
    const panel = this.panel;
    const name = this.row.name;
    this.busy.add(action);
    this.update(this.row);
    this.say('');
    try {
      if (action === 'stop') {
        this.parts.status.textContent = 'stopping';
        await panel.api.stop(name);
      } else if (action === 'restart' && rerunsItsCell(this.row)) {
        await panel.actions.rerunCell(this.row); // the notebook comes to the front, the cell runs there
      } else if (action === 'restart' && isEnded(this.row)) {
        await panel.actions.restartEnded(this.row);
      } else if (action === 'restart') {
        await panel.api.restart(name);
      } else if (action === 'remove') {
        await panel.api.remove(name);
      } else if (action === 'log') {
        panel.actions.openLog(this.row);
      } else if (action === 'tensorboard') {
        await panel.actions.tensorboard(this.row);
      } else if (action === 'attach') {
        await panel.actions.attach(this.row);
      }
    } catch (error) {
      this.say(`${action}: ${(error as Error).message}`);
    } finally {
      this.busy.delete(action);
      this.update(this.row);
      void panel.refresh();
    }
  }
}

export class ClustersPanel extends Widget {
  readonly api: ClustersAPI;
  readonly actions: IRowActions;
  private rows = new Map<string, RowView>();
  private list: HTMLDivElement;
  private header: HTMLDivElement;
  private timer: number | undefined;
  pollVisibleMs: number;
  pollHiddenMs: number;

  constructor(options: IPanelOptions) {
    super();
    this.api = options.api;
    this.actions = options.actions;
    this.pollVisibleMs = options.pollVisibleMs ?? 1000;
    this.pollHiddenMs = options.pollHiddenMs ?? 5000;
    this.id = 'nbworkers-sidebar';
    this.addClass('nbw-sb');
    this.title.label = 'nbworkers';
    this.title.caption = 'nbworkers';
    const top = div('nbw-sb-top', this.node);
    div('nbw-sb-title', top).textContent = 'nbworkers';
    this.header = div('nbw-sb-summary', top);
    this.list = div('nbw-sb-list', this.node);
    void this.refresh();
  }

  dispose(): void {
    window.clearTimeout(this.timer);
    super.dispose();
  }

  /** Fetch the listing now and update the rows; schedules the next fetch. */
  async refresh(): Promise<void> {
    window.clearTimeout(this.timer);
    try {
      const listing = await this.api.list();
      this.render(listing.clusters, listing.run_root);
    } catch (error) {
      this.header.textContent = `cannot read the nbworkers API: ${(error as Error).message}`;
      this.header.classList.add('nbw-sb-error');
    }
    if (!this.isDisposed) {
      window.clearTimeout(this.timer);
      const wait = this.isVisible ? this.pollVisibleMs : this.pollHiddenMs;
      this.timer = window.setTimeout(() => void this.refresh(), wait);
    }
  }

  protected onAfterShow(): void {
    void this.refresh();
  }

  private render(clusters: IRunRow[], runRoot: string): void {
    this.header.classList.remove('nbw-sb-error');
    const live = clusters.filter(row => !isEnded(row)).length;
    this.header.textContent = clusters.length
      ? `${live} running, ${clusters.length - live} ended · ${runRoot}`
      : `no runs under ${runRoot}: run a %%worker cell`;
    this.title.caption = summary(clusters);
    this.node.dataset.running = String(live);
    const seen = new Set<string>();
    let order = true;
    const children = Array.from(this.list.children);
    clusters.forEach((row, index) => {
      seen.add(row.name);
      let view = this.rows.get(row.name);
      if (view) {
        view.update(row);
      } else {
        view = new RowView(row, this);
        this.rows.set(row.name, view);
      }
      if (children[index] !== view.node) {
        order = false;
      }
    });
    for (const [name, view] of this.rows) {
      if (!seen.has(name)) {
        view.node.remove();
        this.rows.delete(name);
      }
    }
    if (!order || this.list.children.length !== clusters.length) {
      for (const row of clusters) {
        this.list.appendChild(this.rows.get(row.name)!.node);
      }
    }
  }
}
