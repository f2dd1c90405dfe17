// CodeCue for VS Code: starts codecue-lsp over stdio; vscode-languageclient's inline completion feature shows
// its suggestions as ghost text. This file only wires things: settings.ts, server-path.ts, status.ts,
// telemetry.ts and cursor-rest.ts hold the rules.
import { homedir } from 'node:os';
import * as vscode from 'vscode';
import {
  CloseAction, ErrorAction, LanguageClient, LanguageClientOptions, ServerOptions, State, TransportKind,
} from 'vscode-languageclient/node';

import { CursorRest, EditorState, METHOD as MOVE_CURSOR } from './cursor-rest';
import { RestartPolicy } from './restarts';
import { expandPath, Places, resolveServer } from './server-path';
import {
  documentSelector, languageEnabled, languagesOutside, mergeGlobs, needsRestart, readSettings, serverSettings, Settings,
} from './settings';
import { Status } from './status';
import { LineAt, Place, textAtCursor, Tracker } from './telemetry';

let client: LanguageClient | undefined;
let clientLanguages: string[] = []; // the enabled languages when the client started: its document selector
let settings: Settings;
let output: vscode.LogOutputChannel;
let statusItem: vscode.StatusBarItem;
const status = new Status();
const tracker = new Tracker((method, params) => {
  client?.sendNotification(method, params).catch(() => undefined); // a stopped server just misses the count
});
const cursorRest = new CursorRest({
  active: () => editorState(vscode.window.activeTextEditor),
  switches: () => ({
    enable: settings.enable, prepareAtCursor: settings.prepareAtCursor, running: client?.isRunning() ?? false,
  }),
  send: (params) => {
    client?.sendNotification(MOVE_CURSOR, params).catch(() => undefined); // a stopped server just misses the hint
  },
});

function currentSettings(): Settings {
  const s = readSettings(vscode.workspace.getConfiguration('codecue'));
  // excludeGlobs is resource-scoped: a folder of a multi-root workspace may add its own exclusions.
  const folders = vscode.workspace.workspaceFolders ?? [];
  s.excludeGlobs = mergeGlobs([s.excludeGlobs,
    ...folders.map((f) => vscode.workspace.getConfiguration('codecue', f.uri).get<unknown>('excludeGlobs', []))]);
  return s;
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

function linesOf(document: vscode.TextDocument): LineAt {
  return (line) => document.lineAt(line).text;
}

async function provideInlineCompletionItems(
  document: vscode.TextDocument,
  position: vscode.Position,
  context: vscode.InlineCompletionContext,
  token: vscode.CancellationToken,
  next: (d: vscode.TextDocument, p: vscode.Position, c: vscode.InlineCompletionContext, t: vscode.CancellationToken)
    => vscode.ProviderResult<vscode.InlineCompletionItem[] | vscode.InlineCompletionList>,
): Promise<vscode.InlineCompletionItem[] | vscode.InlineCompletionList | null | undefined> {
  // A language switched off since the client started: its documents are still sent, but not completed.
  if (!settings.enable || !languageEnabled(settings.enabledLanguages, document.languageId)) {
    return [];
  }
  const place = placeOf(document, position);
  const lineAt = linesOf(document);
  tracker.requested(place, lineAt);
  const started = Date.now();
  const result = await next(document, position, context, token);
  if (token.isCancellationRequested) {
    return result;
  }
  const items = Array.isArray(result) ? result : result?.items ?? [];
  if (items.length > 0) {
    // Only a suggestion says the model works: a server still loading (after a restart, say) answers empty.
    status.latency(Date.now() - started);
    render();
  }
  // Every item goes back to VS Code: after an explicit request (its next/previous suggestion commands) there may be
  // several to cycle through. Each gets a command, which VS Code runs after Tab inserted it: the accept notification.
  const usable: [vscode.InlineCompletionItem, string][] = [];
  for (const item of items) {
    const insert = typeof item.insertText === 'string' ? item.insertText : item.insertText.value;
    const start = item.range?.start.line === position.line ? item.range.start.character : undefined;
    const text = textAtCursor(insert, start, place);
    if (text !== undefined) {
      usable.push([item, text]);
    }
  }
  const ids = tracker.provided(place, usable.map(([, text]) => text), lineAt);
  usable.forEach(([item], i) => {
    item.command = { title: 'CodeCue: accepted', command: 'codecue.didAccept', arguments: [place.uri, ids[i]] };
  });
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
  const inserted = to.isAfter(from) ? editor.document.getText(new vscode.Range(from, to)) : '';
  tracker.partlyAccepted(place, inserted, linesOf(editor.document));
}

/** A document's uri as the client converts it for didOpen, so the server finds the document it has. */
function protocolUri(document: vscode.TextDocument): string {
  return client?.code2ProtocolConverter.asUri(document.uri) ?? document.uri.toString();
}

/** An editor as cursor-rest.ts sees it. */
function editorState(editor: vscode.TextEditor | undefined): EditorState | undefined {
  if (!editor) {
    return undefined;
  }
  const { document, selection } = editor;
  return {
    uri: protocolUri(document),
    version: document.version,
    line: selection.active.line,
    character: selection.active.character,
    cursors: editor.selections.length,
    empty: selection.isEmpty,
    served: wanted(document),
  };
}

function places(): Places {
  return { home: homedir(), workspaceFolder: vscode.workspace.workspaceFolders?.[0]?.uri.fsPath };
}

const LOAD_PROGRESS = 'codecue-load-'; // codecue_lsp/loading.py's $/progress token

/** Write errors never stop the client (a dead server fails every write); its exit decides (restarts.ts). */
function errorHandler(policy: RestartPolicy): NonNullable<LanguageClientOptions['errorHandler']> {
  return {
    error: () => ({ action: ErrorAction.Continue }),
    closed: () => policy.closed() === 'restart'
      ? { action: CloseAction.Restart }
      : { action: CloseAction.DoNotRestart, message: 'The CodeCue server crashed 5 times in 3 minutes: click "CodeCue crashed" to start it again.' },
  };
}

function createClient(s: Settings, command: string, env: Record<string, string | undefined>): LanguageClient {
  const where = places();
  const serverOptions: ServerOptions = {
    command,
    args: s.serverArgs.map((arg) => expandPath(arg, where)),
    transport: TransportKind.stdio, // the client appends --stdio itself
    options: { env },
  };
  const clientOptions: LanguageClientOptions = {
    documentSelector: documentSelector(s),
    outputChannel: output,
    initializationOptions: serverSettings(s),
    // No `workspaceFolder` here: unpinned, the client sends every workspace folder (initialize's workspaceFolders
    // and rootUri, then didChangeWorkspaceFolders) and advertises didChangeWatchedFiles with dynamic registration,
    // which the server's project index uses to find and follow the workspace's files.
    synchronize: { configurationSection: 'codecue' },
    errorHandler: errorHandler(new RestartPolicy()),
    middleware: {
      provideInlineCompletionItems,
      // Model loading reports $/progress. Handled here rather than with onRequest(WorkDoneProgressCreateRequest),
      // which the client's own progress feature replaces again when it restarts a crashed server: middleware
      // stays for every restart. Not passed on (next), so VS Code shows no second, generic progress item.
      handleWorkDoneProgress: (token, value) => {
        // Only the model's load (loading.py's token) says loading / ready: the workspace index reports progress too,
        // and its end must not show ready while the model still loads (codecue.stats has the index's state).
        if (String(token).startsWith(LOAD_PROGRESS)) {
          status.progress(value);
          render();
        }
      },
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

function startFailed(message: string): void {
  status.failed(message);
  render();
  output.error(message);
  void vscode.window.showErrorMessage(`CodeCue: ${message}`);
}

async function startClient(): Promise<void> {
  status.starting();
  render();
  const where = places();
  const env: Record<string, string | undefined> = { ...process.env };
  for (const [key, value] of Object.entries(settings.serverEnv)) {
    env[key] = expandPath(value, where);
  }
  const resolved = resolveServer(settings.serverPath, where, env.PATH);
  if ('error' in resolved) {
    startFailed(resolved.error);
    return;
  }
  const c = createClient(settings, resolved.command, env);
  client = c;
  clientLanguages = settings.enabledLanguages;
  // Every state, not only Stopped: after a crash the client restarts the server itself (Starting, Running).
  c.onDidChangeState((e) => {
    if (client !== c) {
      return;
    }
    if (e.newState === State.Starting) {
      status.starting();
    } else if (e.newState === State.Running) {
      status.running();
      // The file that started the server (or all open ones after a crash) has nothing prepared yet.
      cursorRest.focused(editorState(vscode.window.activeTextEditor));
    } else {
      status.stopped(); // Stopped or StartFailed: restarted by the client (Starting follows), or given up
    }
    render();
  });
  try {
    await c.start();
  } catch (err) {
    startFailed(`could not start ${resolved.command}: ${err instanceof Error ? err.message : err}`);
  }
}

async function restartClient(): Promise<void> {
  cursorRest.cancel();
  const old = client;
  client = undefined;
  await old?.stop().catch(() => undefined);
  await startClient();
}

/** Whether an open document is one CodeCue completes: the server (and its model) starts only then, since the
 * extension activates for more languages than are enabled by default. */
function wanted(document: vscode.TextDocument): boolean {
  return languageEnabled(settings.enabledLanguages, document.languageId)
    && (document.uri.scheme === 'file' || document.uri.scheme === 'untitled');
}

async function startWhenWanted(): Promise<void> {
  if (!client && status.phase !== 'error' && vscode.workspace.textDocuments.some(wanted)) {
    await startClient();
  }
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  settings = currentSettings();
  output = vscode.window.createOutputChannel('CodeCue', { log: true });
  statusItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  statusItem.command = 'codecue.statusItemClicked';
  statusItem.show();
  status.enabled = settings.enable;
  context.subscriptions.push(
    output,
    statusItem,
    vscode.commands.registerCommand('codecue.toggle', () =>
      vscode.workspace.getConfiguration('codecue').update('enable', !settings.enable, vscode.ConfigurationTarget.Global)),
    vscode.commands.registerCommand('codecue.statusItemClicked', () =>
      vscode.commands.executeCommand(status.clickAction() === 'restart' ? 'codecue.restartServer' : 'codecue.toggle')),
    vscode.commands.registerCommand('codecue.showLog', () => output.show(true)),
    vscode.commands.registerCommand('codecue.didAccept', (uri: string, id: string) => tracker.accepted(uri, id)),
    vscode.commands.registerCommand('codecue.acceptNextWord', () => acceptPart('word')),
    vscode.commands.registerCommand('codecue.acceptNextLine', () => acceptPart('line')),
    vscode.commands.registerCommand('codecue.triggerSuggestion',
      () => vscode.commands.executeCommand('editor.action.inlineSuggest.trigger')),
    vscode.commands.registerCommand('codecue.restartServer', () => restartClient()),
    vscode.workspace.onDidOpenTextDocument(() => startWhenWanted()),
    // Opening a file and switching to another editor change the active editor; clicks, arrow keys and jumps in
    // it change its selection, as typing does (told apart by the document's version, cursor-rest.ts).
    vscode.window.onDidChangeActiveTextEditor((editor) => cursorRest.focused(editorState(editor))),
    vscode.window.onDidChangeTextEditorSelection((e) => {
      // Only the user's cursor: not that of another split, shifted by an edit in this one.
      if (e.textEditor === vscode.window.activeTextEditor) {
        cursorRest.selectionChanged(editorState(e.textEditor)!);
      }
    }),
    vscode.workspace.onDidCloseTextDocument((document) => cursorRest.closed(protocolUri(document))),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (!e.affectsConfiguration('codecue')) {
        return;
      }
      const before = settings;
      settings = currentSettings();
      status.enabled = settings.enable;
      render();
      // A language switched off needs no restart; one the running client does not send documents of does.
      const restart = needsRestart(before, settings)
        || languagesOutside(clientLanguages, settings.enabledLanguages).length > 0;
      if (restart && (client || status.phase === 'error')) {
        await restartClient();
      } else {
        await startWhenWanted(); // a language just enabled may have a document open already
      }
    }),
    cursorRest,
    { dispose: () => void client?.stop() },
  );
  status.phase = 'idle';
  render();
  await startWhenWanted();
}

export async function deactivate(): Promise<void> {
  cursorRest.dispose();
  await client?.stop();
}
