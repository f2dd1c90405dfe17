// CodeCue for VS Code: starts codecue-lsp over stdio; vscode-languageclient's inline completion feature shows
// its suggestions as ghost text. This file only wires things: settings.ts, status.ts and telemetry.ts hold the rules.
import * as vscode from 'vscode';
import {
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  State,
  TransportKind,
  WorkDoneProgress,
  WorkDoneProgressCreateRequest,
} from 'vscode-languageclient/node';

import { documentSelector, needsRestart, readSettings, serverSettings, Settings } from './settings';
import { Status } from './status';
import { Place, textAtCursor, Tracker } from './telemetry';

let client: LanguageClient | undefined;
let settings: Settings;
let output: vscode.LogOutputChannel;
let statusItem: vscode.StatusBarItem;
const status = new Status();
const tracker = new Tracker((method, params) => {
  client?.sendNotification(method, params).catch(() => undefined); // a stopped server just misses the count
});

function currentSettings(): Settings {
  return readSettings(vscode.workspace.getConfiguration('codecue'));
}

function render(): void {
  const view = status.view();
  statusItem.text = view.text;
  statusItem.tooltip = view.tooltip;
  statusItem.backgroundColor = view.error ? new vscode.ThemeColor('statusBarItem.errorBackground') : undefined;
  void vscode.commands.executeCommand('setContext', 'codecue.active', settings.enable);
}

function placeOf(document: vscode.TextDocument, position: vscode.Position): Place {
  const before = document.lineAt(position.line).text.slice(0, position.character);
  return { uri: document.uri.toString(), line: position.line, before };
}

async function provideInlineCompletionItems(
  document: vscode.TextDocument,
  position: vscode.Position,
  context: vscode.InlineCompletionContext,
  token: vscode.CancellationToken,
  next: (d: vscode.TextDocument, p: vscode.Position, c: vscode.InlineCompletionContext, t: vscode.CancellationToken)
    => vscode.ProviderResult<vscode.InlineCompletionItem[] | vscode.InlineCompletionList>,
): Promise<vscode.InlineCompletionItem[] | vscode.InlineCompletionList | null | undefined> {
  if (!settings.enable) {
    return [];
  }
  const place = placeOf(document, position);
  tracker.requested(place);
  const started = Date.now();
  const result = await next(document, position, context, token);
  if (token.isCancellationRequested) {
    return result;
  }
  status.latency(Date.now() - started);
  render();
  const items = Array.isArray(result) ? result : result?.items ?? [];
  for (const item of items) {
    const insert = typeof item.insertText === 'string' ? item.insertText : item.insertText.value;
    const start = item.range?.start.line === position.line ? item.range.start.character : undefined;
    const text = textAtCursor(insert, start, place);
    if (text !== undefined) {
      // VS Code runs the item's command after Tab inserted it: that is the accept notification.
      item.command = { title: 'CodeCue: accepted', command: 'codecue.didAccept', arguments: [place.uri, text] };
      tracker.provided(place, text);
      break;
    }
  }
  return result;
}

async function acceptPart(kind: 'word' | 'line'): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  const command = kind === 'word' ? 'editor.action.inlineSuggest.acceptNextWord' : 'editor.action.inlineSuggest.acceptNextLine';
  if (!editor) {
    await vscode.commands.executeCommand(command);
    return;
  }
  const from = editor.selection.active;
  const place = placeOf(editor.document, from);
  await vscode.commands.executeCommand(command);
  const to = editor.selection.active;
  tracker.partlyAccepted(place, to.isAfter(from) ? editor.document.getText(new vscode.Range(from, to)) : '');
}

function createClient(s: Settings): LanguageClient {
  const serverOptions: ServerOptions = {
    command: s.serverPath,
    args: s.serverArgs,
    transport: TransportKind.stdio, // the client appends --stdio itself
    options: { env: { ...process.env, ...s.serverEnv } },
  };
  const clientOptions: LanguageClientOptions = {
    documentSelector: documentSelector(s),
    outputChannel: output,
    initializationOptions: serverSettings(s),
    synchronize: { configurationSection: 'codecue' },
    middleware: {
      provideInlineCompletionItems,
      workspace: {
        // Answer the server's workspace/configuration with only the keys it knows.
        configuration: (params, token, next) =>
          params.items.some((item) => item.section === 'codecue')
            ? params.items.map((item) => (item.section === 'codecue' ? serverSettings(currentSettings()) : null))
            : next(params, token),
      },
    },
  };
  return new LanguageClient('codecue', 'CodeCue', serverOptions, clientOptions);
}

async function startClient(): Promise<void> {
  status.phase = 'starting';
  render();
  const c = createClient(settings);
  client = c;
  c.onDidChangeState((e) => {
    if (e.newState === State.Stopped && client === c) {
      status.stopped();
      render();
    }
  });
  try {
    await c.start();
  } catch (err) {
    status.failed(`could not start ${settings.serverPath}: ${err instanceof Error ? err.message : err}`);
    render();
    void vscode.window.showErrorMessage(
      `CodeCue: could not start "${settings.serverPath}". Install it (pip install codecue) and set codecue.server.path.`);
    return;
  }
  // The model loads in the background with $/progress: show it in the status bar instead of a notification.
  c.onRequest(WorkDoneProgressCreateRequest.type, ({ token }) => {
    c.onProgress(WorkDoneProgress.type, token, (value) => {
      status.progress(value);
      render();
    });
  });
}

async function restartClient(): Promise<void> {
  const old = client;
  client = undefined;
  await old?.stop().catch(() => undefined);
  await startClient();
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  settings = currentSettings();
  output = vscode.window.createOutputChannel('CodeCue', { log: true });
  statusItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  statusItem.command = 'codecue.toggle';
  statusItem.show();
  status.enabled = settings.enable;
  context.subscriptions.push(
    output,
    statusItem,
    vscode.commands.registerCommand('codecue.toggle', () =>
      vscode.workspace.getConfiguration('codecue').update('enable', !settings.enable, vscode.ConfigurationTarget.Global)),
    vscode.commands.registerCommand('codecue.showLog', () => output.show(true)),
    vscode.commands.registerCommand('codecue.didAccept', (uri: string, text: string) => tracker.accepted(uri, text)),
    vscode.commands.registerCommand('codecue.acceptNextWord', () => acceptPart('word')),
    vscode.commands.registerCommand('codecue.acceptNextLine', () => acceptPart('line')),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (!e.affectsConfiguration('codecue')) {
        return;
      }
      const before = settings;
      settings = currentSettings();
      status.enabled = settings.enable;
      render();
      if (needsRestart(before, settings)) {
        await restartClient();
      }
    }),
    { dispose: () => void client?.stop() },
  );
  await startClient();
}

export async function deactivate(): Promise<void> {
  await client?.stop();
}
