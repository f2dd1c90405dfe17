// A small stand-in for the `vscode` module and vscode-languageclient's LanguageClient, enough to run
// extension.ts under node --test. Installed with install() before extension.js is required.
import Module = require('node:module');

type Listener = (e: { affectsConfiguration(section: string): boolean }) => unknown;

export class Position {
  constructor(readonly line: number, readonly character: number) {}
  isAfter(other: Position): boolean {
    return this.line > other.line || (this.line === other.line && this.character > other.character);
  }
}

export class Range {
  constructor(readonly start: Position, readonly end: Position) {}
}

export class FakeClient {
  static last: FakeClient | undefined;
  notifications: [string, Record<string, unknown>][] = [];
  requestHandlers = new Map<string, (params: any) => unknown>();
  progressHandlers = new Map<string, (value: any) => void>();
  started = false;
  stopped = false;
  state = 1; // Stopped, Running 2, Starting 3 (the State of install() below)
  code2ProtocolConverter = { asUri: (uri: { toString(): string }) => uri.toString() };
  constructor(readonly id: string, readonly name: string, readonly serverOptions: any, readonly clientOptions: any) {
    FakeClient.last = this;
  }
  async start() { this.started = true; this.state = 2; }
  async stop() { this.stopped = true; this.state = 1; }
  isRunning() { return this.state === 2; }
  stateListeners: ((e: { oldState: number; newState: number }) => void)[] = [];
  onDidChangeState(listener: (e: { oldState: number; newState: number }) => void) {
    this.stateListeners.push(listener);
    return { dispose() {} };
  }
  /** What vscode-languageclient does when the server crashes and it restarts it. */
  crashAndRestart() {
    for (const newState of [1, 3, 2]) { // Stopped, Starting, Running
      this.state = newState;
      for (const listener of this.stateListeners) listener({ oldState: 0, newState });
    }
  }
  /** What vscode-languageclient does when the server crashed too often: it stops and stays stopped. */
  crashAndGiveUp() {
    this.state = 1;
    for (const listener of this.stateListeners) listener({ oldState: 2, newState: 1 });
  }
  async sendNotification(method: string, params: Record<string, unknown>) { this.notifications.push([method, params]); }
  onRequest(type: { method: string }, handler: (params: any) => unknown) { this.requestHandlers.set(type.method, handler); }
  onProgress(_type: unknown, token: string, handler: (value: any) => void) { this.progressHandlers.set(token, handler); }
}

export function createVscode() {
  const config: Record<string, unknown> = {}; // the user's settings
  // The open workspace's .vscode/settings.json: VS Code's get() merges it over the user's (folders over both).
  const workspaceConfig: Record<string, unknown> = {};
  // Values a workspace folder sets for itself (resource-scoped settings), by the folder's fsPath.
  const folderConfig: Record<string, Record<string, unknown>> = {};
  const commands = new Map<string, (...args: any[]) => unknown>();
  const executed: unknown[][] = [];
  const configListeners: Listener[] = [];
  const openListeners: ((doc: unknown) => unknown)[] = [];
  const closeListeners: ((doc: unknown) => unknown)[] = [];
  const activeEditorListeners: ((editor: unknown) => unknown)[] = [];
  const selectionListeners: ((e: { textEditor: unknown }) => unknown)[] = [];
  const errors: string[] = [];
  const statusItem = { text: '', tooltip: '', command: '', backgroundColor: undefined as unknown, show() {}, dispose() {} };
  const vscode = {
    config, workspaceConfig, folderConfig, registered: commands, executed, statusItem, errors, openListeners, closeListeners,
    activeEditorListeners, selectionListeners,
    Position, Range,
    StatusBarAlignment: { Left: 1, Right: 2 },
    ConfigurationTarget: { Global: 1 },
    ThemeColor: class { constructor(readonly id: string) {} },
    window: {
      activeTextEditor: undefined as unknown,
      createOutputChannel: () => ({ show() {}, dispose() {}, appendLine() {}, error(m: string) { errors.push(m); } }),
      createStatusBarItem: () => statusItem,
      showErrorMessage: async (message: string) => { executed.push(['showErrorMessage', message]); },
      onDidChangeActiveTextEditor: (listener: (editor: unknown) => unknown) => {
        activeEditorListeners.push(listener);
        return { dispose() {} };
      },
      onDidChangeTextEditorSelection: (listener: (e: { textEditor: unknown }) => unknown) => {
        selectionListeners.push(listener);
        return { dispose() {} };
      },
    },
    workspace: {
      getConfiguration: (section: string, scope?: { fsPath: string }) => ({
        get: <T>(key: string, fallback: T): T => {
          const own = scope ? folderConfig[scope.fsPath] ?? {} : {};
          const values = [own, workspaceConfig, config].find((v) => `${section}.${key}` in v) ?? {};
          return `${section}.${key}` in values ? values[`${section}.${key}`] as T : fallback;
        },
        inspect: <T>(key: string) => ({
          key: `${section}.${key}`,
          globalValue: config[`${section}.${key}`] as T | undefined,
          workspaceValue: workspaceConfig[`${section}.${key}`] as T | undefined,
          workspaceFolderValue: scope ? folderConfig[scope.fsPath]?.[`${section}.${key}`] as T | undefined : undefined,
        }),
        update: async (key: string, value: unknown) => {
          config[`${section}.${key}`] = value;
          for (const listener of configListeners) {
            await listener({ affectsConfiguration: (s: string) => s === section });
          }
        },
      }),
      onDidChangeConfiguration: (listener: Listener) => { configListeners.push(listener); return { dispose() {} }; },
      /** Test hook: the workspace's settings file now holds `values` (as VS Code reloads .vscode/settings.json). */
      setWorkspaceSettings: async (values: Record<string, unknown>) => {
        for (const key of Object.keys(workspaceConfig)) delete workspaceConfig[key];
        Object.assign(workspaceConfig, values);
        for (const listener of configListeners) {
          await listener({ affectsConfiguration: (s: string) => s === 'codecue' });
        }
      },
      workspaceFolders: undefined as { uri: { fsPath: string } }[] | undefined,
      textDocuments: [] as unknown[],
      onDidOpenTextDocument: (listener: (doc: unknown) => unknown) => { openListeners.push(listener); return { dispose() {} }; },
      onDidCloseTextDocument: (listener: (doc: unknown) => unknown) => { closeListeners.push(listener); return { dispose() {} }; },
    },
    commands: {
      registerCommand: (id: string, fn: (...args: any[]) => unknown) => { commands.set(id, fn); return { dispose() {} }; },
      executeCommand: async (id: string, ...args: unknown[]) => {
        executed.push([id, ...args]);
        return commands.get(id)?.(...args);
      },
    },
  };
  return vscode;
}

export function install(vscode: ReturnType<typeof createVscode>): void {
  const languageclient = {
    LanguageClient: FakeClient,
    TransportKind: { stdio: 0 },
    State: { Stopped: 1, Running: 2, Starting: 3 },
    ErrorAction: { Continue: 1, Shutdown: 2 },
    CloseAction: { DoNotRestart: 1, Restart: 2 },
    WorkDoneProgress: { type: { method: '$/progress' } },
    WorkDoneProgressCreateRequest: { type: { method: 'window/workDoneProgress/create' } },
  };
  const loader = Module as unknown as { _load: (request: string, ...rest: unknown[]) => unknown };
  const original = loader._load;
  loader._load = function (request: string, ...rest: unknown[]) {
    if (request === 'vscode') return vscode;
    if (request === 'vscode-languageclient/node') return languageclient;
    return original.call(this, request, ...rest);
  };
}

/** A one-line document for the inline completion middleware. VS Code raises `version` with every edit. */
export function document(uri: string, text: string, languageId = 'python') {
  const scheme = uri.slice(0, uri.indexOf(':'));
  return {
    uri: { scheme, toString: () => uri }, languageId, version: 1, lineAt: (_line: number) => ({ text }),
    getText: () => text,
  };
}

/** A text editor on `doc` with one cursor (no selection) at line:character. */
export function editor(doc: ReturnType<typeof document>, line = 0, character = 0) {
  const ed = { document: doc, selection: cursorAt(line, character), selections: [] as unknown[] };
  ed.selections = [ed.selection];
  return ed;
}

function cursorAt(line: number, character: number) {
  const at = new Position(line, character);
  return { active: at, anchor: at, start: at, end: at, isEmpty: true };
}

/** `ed` becomes the active editor (a file opened, a tab switched to). */
export async function focus(vscode: ReturnType<typeof createVscode>, ed: ReturnType<typeof editor> | undefined) {
  vscode.window.activeTextEditor = ed;
  for (const listener of vscode.activeEditorListeners) await listener(ed);
}

/** The cursor of `ed` moves to line:character (a click; with doc.version raised first, typing). */
export async function moveCursor(vscode: ReturnType<typeof createVscode>, ed: ReturnType<typeof editor>,
  line: number, character: number) {
  ed.selection = cursorAt(line, character);
  ed.selections = [ed.selection];
  for (const listener of vscode.selectionListeners) await listener({ textEditor: ed });
}

/** Opens `doc` in the mocked workspace, as VS Code does before it tells listeners. */
export async function open(vscode: ReturnType<typeof createVscode>, doc: unknown): Promise<void> {
  vscode.workspace.textDocuments.push(doc);
  for (const listener of vscode.openListeners) await listener(doc);
}
