/**
 * The nbworkers sidebar plugin: a left-area panel titled "nbworkers" in JupyterLab and in Notebook 7.
 *
 * It lists every run under the run root (panel.ts, from the server extension's REST API), opens logs
 * (logview.ts; in Notebook 7, the log's text in a browser tab), and puts `%workers attach NAME` or
 * `%workers tensorboard NAME` cells into the current notebook and runs them.
 */
import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { LabIcon } from '@jupyterlab/ui-components';

import { ClustersAPI, IRunRow } from './api';
import { LOG_TAIL_LINES, LogView } from './logview';
import { ClustersPanel } from './panel';
import { sameNotebook } from './format';

export const COMMAND_OPEN = 'nbworkers:open-sidebar';
const LOAD_EXTENSION = "get_ipython().extension_manager.load_extension('nbworkers')";

/** The notebook's kernel, once ready, with nbworkers loaded in it (silently): where the sidebar's cells run. */
async function loadInKernel(panel: NotebookPanel): Promise<void> {
  await panel.sessionContext.ready;
  const kernel = panel.sessionContext.session?.kernel;
  if (!kernel) {
    throw new Error(`${panel.context.path} has no kernel: start one first`);
  }
  await kernel.requestExecute({ code: LOAD_EXTENSION, silent: true, store_history: false }).done;
}

const ICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">
<g class="jp-icon3" fill="#616161"><rect x="1" y="2" width="14" height="3" rx="1"/>
<rect x="1" y="6.5" width="10" height="3" rx="1"/><rect x="1" y="11" width="6" height="3" rx="1"/></g></svg>`;

export const nbworkersIcon = new LabIcon({ name: 'nbworkers:sidebar', svgstr: ICON_SVG });

const PLUGIN_ID = 'nbworkers:sidebar'; // its settings: schema/sidebar.json

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Every nbworkers run and session under the run root, live, in the left sidebar.',
  autoStart: true,
  optional: [INotebookTracker, ILabShell, ILayoutRestorer, ICommandPalette, ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker | null,
    labShell: ILabShell | null,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    settingRegistry: ISettingRegistry | null
  ) => {
    let logRefreshMs = 2000;
    const api = new ClustersAPI(app.serviceManager.serverSettings);
    const notebooks = new Map<string, string>(); // kernel id -> notebook path, for this server's kernels
    const sessions = app.serviceManager.sessions;
    const kernels = app.serviceManager.kernels;
    const syncSessions = () => {
      notebooks.clear();
      for (const session of sessions.running()) {
        if (session.kernel) {
          notebooks.set(session.kernel.id, session.path);
        }
      }
    };
    sessions.runningChanged.connect(syncSessions);
    syncSessions();

    /** Insert `code` below the current notebook's active cell and run it (the extension loaded first). */
    async function runInNotebook(code: string): Promise<void> {
      const panel = tracker?.currentWidget;
      if (!panel) {
        throw new Error('open a notebook first: the cell goes into the current notebook');
      }
      await loadInKernel(panel);
      const notebook = panel.content;
      NotebookActions.insertBelow(notebook);
      const cell = notebook.activeCell;
      if (!cell) {
        throw new Error(`no cell could be added to ${panel.context.path}`);
      }
      cell.model.sharedModel.setSource(code);
      app.shell.activateById(panel.id);
      await NotebookActions.run(notebook, panel.sessionContext);
    }

    /** ``.restart()`` of an ended run in the kernel that ran it (a run that ended has no supervisor to ask). */
    async function restartEnded(row: IRunRow): Promise<void> {
      const model = Array.from(kernels.running()).find(kernel => kernel.id === row.kernel?.id);
      if (!model) {
        throw new Error(`its kernel is not running on this server: run the cell again`);
      }
      const connection = kernels.connectTo({ model });
      try {
        const code = `import nbworkers\nnbworkers.get_cluster(${JSON.stringify(row.name)}).restart()`;
        const reply = await connection.requestExecute({ code, silent: true, store_history: false }).done;
        const content = reply.content as { status: string; ename?: string; evalue?: string };
        if (content.status !== 'ok') {
          throw new Error(`${content.ename || content.status}: ${content.evalue || ''}`);
        }
      } finally {
        connection.dispose();
      }
    }

    /** The open notebook and the index of the cell that started ``row``, or why the cell cannot run again: the
     * notebook whose kernel the run had (a restarted kernel keeps its id), else the one at the recorded path. */
    function cellOf(row: IRunRow): { panel: NotebookPanel; index: number } | string {
      const name = row.notebook ? row.notebook.split('/').pop() : 'its notebook';
      if (!row.cell_id) {
        return 'nbworkers did not record the cell that started it: run that cell again in its notebook';
      }
      const kernelId = row.kernel?.id || '';
      const panel =
        tracker?.find(p => !!kernelId && p.sessionContext.session?.kernel?.id === kernelId) ||
        tracker?.find(p => sameNotebook(row.notebook, p.context.path));
      if (!panel) {
        return `${name} is not open: open it to run the cell that started this run again`;
      }
      const index = panel.content.widgets.findIndex(cell => cell.model.id === row.cell_id);
      if (index < 0) {
        return `the cell that started this run is no longer in ${panel.context.path}: run the cell you want there`;
      }
      return { panel, index };
    }

    /** Run the cell that started ``row`` again in its notebook's current kernel (the extension loaded first). */
    async function rerunCell(row: IRunRow): Promise<void> {
      const found = cellOf(row);
      if (typeof found === 'string') {
        throw new Error(found);
      }
      const { panel, index } = found;
      await loadInKernel(panel);
      const notebook = panel.content;
      notebook.deselectAll();
      notebook.activeCellIndex = index;
      app.shell.activateById(panel.id);
      await NotebookActions.run(notebook, panel.sessionContext);
    }

    const openLog = (row: IRunRow) => {
      if (!labShell) {
        // Notebook 7's main area holds its one document: the log's text opens in a browser tab
        window.open(api.logUrl(row.name, 0, LOG_TAIL_LINES), '_blank');
        return;
      }
      const id = `nbworkers-log-${row.name}`;
      for (const widget of app.shell.widgets('main')) {
        if (widget.id === id) {
          app.shell.activateById(id);
          return;
        }
      }
      const content = new LogView(api, row.name, row.workers, () => logRefreshMs);
      const widget = new MainAreaWidget({ content });
      widget.id = id;
      widget.title.label = `${row.name} log`;
      widget.title.icon = nbworkersIcon;
      widget.title.closable = true;
      app.shell.add(widget, 'main');
      app.shell.activateById(id);
    };

    const sidebar = new ClustersPanel({
      api,
      actions: {
        openLog,
        tensorboard: row => runInNotebook(`%workers tensorboard ${row.name}`),
        attach: row => runInNotebook(`%workers attach ${row.name}`),
        restartEnded,
        rerunCell,
        rerunBlocked: row => {
          const found = cellOf(row);
          return typeof found === 'string' ? found : '';
        },
        notebookName: row => {
          const found = cellOf(row);
          return typeof found === 'string' ? '' : found.panel.context.path;
        },
        notebookOf: kernelId => notebooks.get(kernelId) || '',
        kernelHere: kernelId => Array.from(kernels.running()).some(kernel => kernel.id === kernelId)
      }
    });
    sidebar.title.icon = nbworkersIcon;
    if (settingRegistry) {
      const apply = (settings: ISettingRegistry.ISettings) => {
        const seconds = (key: string, fallback: number) => {
          const value = settings.get(key).composite;
          return 1000 * (typeof value === 'number' && value > 0 ? value : fallback);
        };
        sidebar.pollVisibleMs = seconds('pollVisibleSeconds', 1);
        sidebar.pollHiddenMs = seconds('pollHiddenSeconds', 5);
        logRefreshMs = seconds('logRefreshSeconds', 2);
      };
      settingRegistry
        .load(PLUGIN_ID)
        .then(settings => {
          apply(settings);
          settings.changed.connect(apply);
        })
        .catch(reason => console.warn('nbworkers: sidebar settings not loaded', reason));
    }
    app.shell.add(sidebar, 'left', { rank: 950 });
    if (restorer) {
      restorer.add(sidebar, 'nbworkers-sidebar');
    }
    app.commands.addCommand(COMMAND_OPEN, {
      label: 'Show the nbworkers sidebar',
      caption: 'Every nbworkers run and session, live',
      execute: () => {
        app.shell.activateById(sidebar.id);
      }
    });
    if (palette) {
      palette.addItem({ command: COMMAND_OPEN, category: 'nbworkers' });
    }
  }
};

export default plugin;
