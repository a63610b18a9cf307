/**
 * A run's worker logs in a main-area tab: a worker picker and the log's last lines, refreshed while shown.
 * The text comes from GET /nbworkers/api/clusters/<name>/logs/<worker>?tail=N (text/plain, never HTML).
 */
import { Widget } from '@lumino/widgets';

import { ClustersAPI } from './api';

export const LOG_TAIL_LINES = 2000;

export class LogView extends Widget {
  private picker: HTMLSelectElement;
  private text: HTMLPreElement;
  private timer: number | undefined;

  constructor(
    private api: ClustersAPI,
    readonly runName: string,
    workers: number,
    private refreshMs: () => number // the sidebar's logRefreshSeconds setting, read at each refresh
  ) {
    super();
    this.addClass('nbw-sb-logview');
    this.id = `nbworkers-log-${runName}`;
    this.title.label = `${runName} log`;
    this.title.closable = true;
    const bar = document.createElement('div');
    bar.className = 'nbw-sb-logbar';
    this.picker = document.createElement('select');
    this.picker.className = 'nbw-sb-logpicker';
    for (let index = 0; index < Math.max(1, workers); index++) {
      const option = document.createElement('option');
      option.value = String(index);
      option.textContent = `worker ${index}`;
      this.picker.appendChild(option);
    }
    this.picker.addEventListener('change', () => void this.refresh());
    bar.appendChild(this.picker);
    this.node.appendChild(bar);
    this.text = document.createElement('pre');
    this.text.className = 'nbw-sb-logtext';
    this.node.appendChild(this.text);
  }

  protected onAfterAttach(): void {
    void this.refresh();
  }

  protected onBeforeDetach(): void {
    window.clearTimeout(this.timer);
  }

  dispose(): void {
    window.clearTimeout(this.timer);
    super.dispose();
  }

  async refresh(): Promise<void> {
    window.clearTimeout(this.timer);
    const worker = Number(this.picker.value || 0);
    try {
      const text = await this.api.log(this.runName, worker, LOG_TAIL_LINES);
      const atEnd = this.text.scrollTop + this.text.clientHeight >= this.text.scrollHeight - 4;
      this.text.textContent = text;
      if (atEnd) {
        this.text.scrollTop = this.text.scrollHeight;
      }
    } catch (error) {
      this.text.textContent = `cannot read worker ${worker}'s log: ${(error as Error).message}`;
    }
    if (this.isAttached && !this.isDisposed) {
      this.timer = window.setTimeout(() => void this.refresh(), this.refreshMs());
    }
  }
}
