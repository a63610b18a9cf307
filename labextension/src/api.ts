/**
 * The nbworkers server extension's REST API (extension/serverext.py), called with the page's own
 * credentials (ServerConnection adds the token or the XSRF cookie, as for every JupyterLab request).
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { RunStatus } from './statuses';

/** Epoch/step progress of a run's chief, as GET /nbworkers/api/clusters reports it. */
export interface IProgress {
  epoch: number | null;
  epochs_total: number | null;
  step: number | null;
  steps_total: number | null;
  fraction: number | null; // 0..1 when the totals are known
}

/** A session's summary (``%%worker --session``). */
export interface ISessionSummary {
  name: string;
  cells: number;
  state: string; // idle or busy
  queued: number;
}

/** A run's isolation as state.json records it (magics/backends/isolation.py): ``namespace``, or ``off`` and why;
 * ``ray_tls`` on a Ray run: whether Ray's gRPC runs with TLS. */
export interface IIsolation {
  mode: string;
  reason?: string;
  ray_tls?: string;
}

/** One run in the listing (``RunRow`` in magics/shapes.py). */
export interface IRunRow {
  name: string;
  kernel: { id: string; pid: number | null };
  backend: string;
  workers: number;
  workers_alive: number;
  nodes: string[];
  status: RunStatus; // protocol/statuses.py ClusterStatus (statuses.ts is written from it)
  started: number | null;
  ended: number | null;
  restarts: number;
  error: string;
  kernel_alive: boolean;
  processes_alive: number;
  stop_requested: boolean;
  restart_requested: boolean;
  progress: IProgress | null;
  steps_per_sec: number | null;
  session: ISessionSummary | null;
  detached: boolean; // --detach: its own supervisor process, not its kernel's
  cell_id: string; // the notebook cell that started it ("" when not known): the sidebar runs it again
  notebook: string; // that cell's notebook, as its kernel got the path (absolute, or from the server's root)
  isolation: IIsolation | null; // null: recorded by an older nbworkers
}

export interface IListing {
  run_root: string;
  clusters: IRunRow[];
}

/** A refused request: the server's message says what to do. */
export class APIError extends Error {
  constructor(
    message: string,
    readonly status: number
  ) {
    super(message);
  }
}

export class ClustersAPI {
  constructor(readonly settings: ServerConnection.ISettings = ServerConnection.makeSettings()) {}

  url(...parts: string[]): string {
    return URLExt.join(
      this.settings.baseUrl,
      'nbworkers/api/clusters',
      ...parts.map(encodeURIComponent)
    );
  }

  async request(url: string, init: RequestInit = {}): Promise<string> {
    const response = await ServerConnection.makeRequest(url, init, this.settings);
    const text = await response.text();
    if (!response.ok) {
      let message = text || response.statusText;
      try {
        message = JSON.parse(text).message || message;
      } catch {
        // a plain-text body
      }
      throw new APIError(message, response.status);
    }
    return text;
  }

  async list(): Promise<IListing> {
    return JSON.parse(await this.request(this.url()));
  }

  /** Stop a run (TERM, the stop grace, KILL), even while its kernel is busy. */
  async stop(name: string): Promise<void> {
    await this.request(this.url(name), { method: 'DELETE' });
  }

  /** Restart a live run's group (its supervisor takes the request, even while its kernel is busy). */
  async restart(name: string): Promise<void> {
    await this.request(this.url(name, 'restart'), { method: 'POST' });
  }

  /** Remove an ended run: its directory (logs, state, TensorBoard files) goes. */
  async remove(name: string): Promise<void> {
    await this.request(this.url(name) + '?remove=1', { method: 'DELETE' });
  }

  logUrl(name: string, worker: number, tail: number): string {
    return this.url(name, 'logs', String(worker)) + `?tail=${tail}`;
  }

  async log(name: string, worker: number, tail: number): Promise<string> {
    return this.request(this.logUrl(name, worker, tail));
  }
}
