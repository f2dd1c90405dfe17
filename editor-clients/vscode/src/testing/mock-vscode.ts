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
  constructor(readonly id: string, readonly name: string, readonly serverOptions: any, readonly clientOptions: any) {
    FakeClient.last = this;
  }
  async start() { this.started = true; }
  async stop() { this.stopped = true; }
  stateListeners: ((e: { oldState: number; newState: number }) => void)[] = [];
  onDidChangeState(listener: (e: { oldState: number; newState: number }) => void) {
    this.stateListeners.push(listener);
    return { dispose() {} };
  }
  /** What vscode-languageclient does when the server crashes and it restarts it. */
  crashAndRestart() {
    for (const newState of [1, 3, 2]) { // Stopped, Starting, Running
      for (const listener of this.stateListeners) listener({ oldState: 0, newState });
    }
  }
  async sendNotification(method: string, params: Record<string, unknown>) { this.notifications.push([method, params]); }
  onRequest(type: { method: string }, handler: (params: any) => unknown) { this.requestHandlers.set(type.method, handler); }
  onProgress(_type: unknown, token: string, handler: (value: any) => void) { this.progressHandlers.set(token, handler); }
}

export function createVscode() {
  const config: Record<string, unknown> = {};
  const commands = new Map<string, (...args: any[]) => unknown>();
  const executed: unknown[][] = [];
  const configListeners: Listener[] = [];
  const openListeners: ((doc: unknown) => unknown)[] = [];
  const errors: string[] = [];
  const statusItem = { text: '', tooltip: '', command: '', backgroundColor: undefined as unknown, show() {}, dispose() {} };
  const vscode = {
    config, registered: commands, executed, statusItem, errors, openListeners,
    Position, Range,
    StatusBarAlignment: { Left: 1, Right: 2 },
    ConfigurationTarget: { Global: 1 },
    ThemeColor: class { constructor(readonly id: string) {} },
    window: {
      activeTextEditor: undefined as unknown,
      createOutputChannel: () => ({ show() {}, dispose() {}, appendLine() {}, error(m: string) { errors.push(m); } }),
      createStatusBarItem: () => statusItem,
      showErrorMessage: async (message: string) => { executed.push(['showErrorMessage', message]); },
    },
    workspace: {
      getConfiguration: (section: string) => ({
        get: <T>(key: string, fallback: T): T => (`${section}.${key}` in config ? config[`${section}.${key}`] as T : fallback),
        update: async (key: string, value: unknown) => {
          config[`${section}.${key}`] = value;
          for (const listener of configListeners) {
            await listener({ affectsConfiguration: (s: string) => s === section });
          }
        },
      }),
      onDidChangeConfiguration: (listener: Listener) => { configListeners.push(listener); return { dispose() {} }; },
      workspaceFolders: undefined as { uri: { fsPath: string } }[] | undefined,
      textDocuments: [] as unknown[],
      onDidOpenTextDocument: (listener: (doc: unknown) => unknown) => { openListeners.push(listener); return { dispose() {} }; },
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

/** A one-line document for the inline completion middleware. */
export function document(uri: string, text: string, languageId = 'python') {
  const scheme = uri.slice(0, uri.indexOf(':'));
  return { uri: { scheme, toString: () => uri }, languageId, lineAt: (_line: number) => ({ text }), getText: () => text };
}

/** Opens `doc` in the mocked workspace, as VS Code does before it tells listeners. */
export async function open(vscode: ReturnType<typeof createVscode>, doc: unknown): Promise<void> {
  vscode.workspace.textDocuments.push(doc);
  for (const listener of vscode.openListeners) await listener(doc);
}
