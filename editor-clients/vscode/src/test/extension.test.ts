// extension.ts wired to a mocked vscode API and a fake LanguageClient: what it starts, what the middleware does to
// the server's items, which notifications go out, and what the status bar says.
import { strict as assert } from 'node:assert';
import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

import { REST_MS } from '../cursor-rest';
import { DEFAULT_LANGUAGES } from '../settings';
import {
  createVscode, document, editor, FakeClient, focus, install, moveCursor, open, Position,
} from '../testing/mock-vscode';

// A home with the server in it, for the "~/..." setting the README shows (os.homedir() reads HOME).
const home = mkdtempSync(join(tmpdir(), 'codecue-home-'));
process.env.HOME = home;
mkdirSync(join(home, 'bin'));
writeFileSync(join(home, 'bin', 'codecue-lsp'), '#!/bin/sh\n');
chmodSync(join(home, 'bin', 'codecue-lsp'), 0o755);

const vscode = createVscode();
install(vscode);
// eslint-disable-next-line @typescript-eslint/no-var-requires
const extension = require('../extension');

const token = { isCancellationRequested: false };
const context = { subscriptions: [] as unknown[] };

let activatedOnce = false;

async function activated(): Promise<FakeClient> {
  if (!activatedOnce) {
    activatedOnce = true;
    vscode.config['codecue.server.path'] = '~/bin/codecue-lsp';
    vscode.config['codecue.server.env'] = { CODECUE_HOME: '${userHome}/models' };
    vscode.config['codecue.pair'] = 'tiny';
    await extension.activate(context);
    // Activation (onLanguage for many languages) alone does not load the model.
    assert.equal(FakeClient.last, undefined, 'no server before a file of an enabled language opens');
    assert.match(vscode.statusItem.text, /circle-outline/);
    await open(vscode, document('file:///notes.rb', '', 'ruby'));
    assert.equal(FakeClient.last, undefined, 'ruby is not enabled by default');
    await open(vscode, document('file:///a.py', ''));
  }
  return FakeClient.last!;
}

function provide(client: FakeClient, line: string, items: any[]) {
  const doc = document('file:///a.py', line);
  const next = async () => ({ items });
  return client.clientOptions.middleware.provideInlineCompletionItems(
    doc, new Position(0, line.length), {}, token, next);
}

test('starts the configured server over stdio with the server settings as initializationOptions', async () => {
  const client = await activated();
  assert.equal(client.serverOptions.command, join(home, 'bin', 'codecue-lsp'), '~ is expanded');
  assert.equal(client.serverOptions.options.env.CODECUE_HOME, join(home, 'models'), '${userHome} is expanded');
  assert.equal(client.serverOptions.transport, 0);
  assert.equal(client.clientOptions.initializationOptions.pair, 'tiny');
  assert.equal(client.started, true);
  for (const id of ['codecue.toggle', 'codecue.showLog', 'codecue.acceptNextWord', 'codecue.acceptNextLine',
    'codecue.triggerSuggestion', 'codecue.restartServer']) {
    assert.ok(vscode.registered.has(id), id);
  }
});

test('items get the accept command, and show / accept notifications go to the server', async () => {
  const client = await activated();
  client.notifications.length = 0;
  const result = await provide(client, 'x = fo', [{ insertText: 'foo()', range: { start: new Position(0, 4) } }]);
  const item = result.items[0];
  const [uri, id] = item.command.arguments;
  assert.equal(uri, 'file:///a.py');
  await vscode.commands.executeCommand(item.command.command, ...item.command.arguments);
  assert.deepEqual(client.notifications, [
    ['codecue/didShowCompletion', { uri, length: 3, id }],
    ['codecue/didAcceptCompletion',
      { uri, length: 3, acceptedLength: 3, id, text: 'o()', position: { line: 0, character: 6 } }],
  ]);
  assert.match(vscode.statusItem.text, /CodeCue \d+ ms/);
});

test('every item of an answer goes back to VS Code, each with its own accept command (next/previous suggestion)', async () => {
  const client = await activated();
  client.notifications.length = 0;
  const answer = ['foo()', 'bar()', 'baz()'].map((insertText) => ({ insertText, range: { start: new Position(0, 4) } }));
  const result = await provide(client, 'x = ', answer);
  assert.equal(result.items.length, 3);
  assert.deepEqual(result.items.map((i: any) => i.insertText), ['foo()', 'bar()', 'baz()']);
  const ids = result.items.map((i: any) => i.command.arguments[1]);
  assert.equal(new Set(ids).size, 3);
  assert.deepEqual(client.notifications.map(([m, p]) => [m, p.id]), [['codecue/didShowCompletion', ids[0]]]);
  await vscode.commands.executeCommand('codecue.didAccept', 'file:///a.py', ids[1]); // Tab on the second, cycled to
  assert.deepEqual(client.notifications.map(([m, p]) => [m, p.id]), [
    ['codecue/didShowCompletion', ids[0]], ['codecue/didRejectCompletion', ids[0]],
    ['codecue/didShowCompletion', ids[1]], ['codecue/didAcceptCompletion', ids[1]],
  ]);
  assert.equal(client.notifications[3][1].text, 'bar()');
});

test('typing a suggestion to its end sends one accept with its full length', async () => {
  const client = await activated();
  client.notifications.length = 0;
  const item = () => [{ insertText: 'total()', range: { start: new Position(0, 4) } }];
  for (const typed of ['', 'to', 'tota']) {
    await provide(client, `x = ${typed}`, item());
  }
  await provide(client, 'x = total()', []);
  const sent = client.notifications.map(([m, p]) => [m, p.acceptedLength]);
  assert.deepEqual(sent, [['codecue/didShowCompletion', undefined], ['codecue/didAcceptCompletion', 7]]);
});

test('the server answers workspace/configuration with server settings only', async () => {
  const client = await activated();
  const answer = client.clientOptions.middleware.workspace.configuration(
    { items: [{ section: 'codecue' }] }, token, () => assert.fail('should not ask VS Code'));
  assert.deepEqual(Object.keys(answer[0]).sort(), [
    'coldPromptTokens', 'context', 'contextTokens', 'debounceMs', 'drafter', 'enabledLanguages', 'engine',
    'excludeGlobs', 'indexCache', 'maxIndexedFiles', 'maxTokens', 'middleFrom', 'minConfidence', 'nextLine', 'pair',
    'prepareAtCursor', 'promptTokens',
  ]);
});

test('a workspace settings file that sets the server, its args, env or the engine changes nothing', async () => {
  const client = await activated();
  const before = {
    command: client.serverOptions.command, args: client.serverOptions.args, env: client.serverOptions.options.env,
    init: client.clientOptions.initializationOptions,
  };
  // A program a hostile repository ships: today's extension would start it.
  const evil = join(home, 'evil-repo', 'codecue-lsp');
  mkdirSync(join(home, 'evil-repo'), { recursive: true });
  writeFileSync(evil, '#!/bin/sh\n');
  chmodSync(evil, 0o755);
  const answer = (c: FakeClient) => c.clientOptions.middleware.workspace.configuration(
    { items: [{ section: 'codecue' }] }, token, () => assert.fail('should not ask VS Code'))[0];
  try {
    await vscode.workspace.setWorkspaceSettings({
      'codecue.server.path': evil,
      'codecue.server.args': ['--engine', 'http://evil.example/v1'],
      'codecue.server.env': { LD_PRELOAD: '/tmp/evil.so' },
      'codecue.engine': 'http://evil.example/v1',
    });
    assert.equal(FakeClient.last, client, 'nothing to restart for');
    assert.equal(client.stopped, false);
    assert.equal(answer(client).engine, 'local', 'workspace/configuration does not carry the workspace engine');
    await vscode.commands.executeCommand('codecue.restartServer');
    const again = FakeClient.last!;
    assert.notEqual(again, client);
    assert.deepEqual({
      command: again.serverOptions.command, args: again.serverOptions.args, env: again.serverOptions.options.env,
      init: again.clientOptions.initializationOptions,
    }, before);
    assert.equal(again.serverOptions.options.env.LD_PRELOAD, process.env.LD_PRELOAD);
    assert.equal(answer(again).engine, 'local');
  } finally {
    await vscode.workspace.setWorkspaceSettings({});
  }
});

test('a workspace folder\'s excludeGlobs are added to the window\'s, and changing them restarts nothing', async () => {
  const client = await activated();
  const answer = () => client.clientOptions.middleware.workspace.configuration(
    { items: [{ section: 'codecue' }] }, token, () => assert.fail('should not ask VS Code'))[0];
  vscode.workspace.workspaceFolders = [{ uri: { fsPath: '/w/app' } }, { uri: { fsPath: '/w/lib' } }];
  vscode.folderConfig['/w/lib'] = { 'codecue.excludeGlobs': ['fixtures/', 'secrets/'] };
  try {
    await vscode.workspace.getConfiguration('codecue').update('excludeGlobs', ['secrets/']);
    assert.deepEqual(answer().excludeGlobs, ['secrets/', 'fixtures/']);
    await vscode.workspace.getConfiguration('codecue').update('maxIndexedFiles', 10);
    assert.equal(answer().maxIndexedFiles, 10);
    assert.equal(FakeClient.last, client, 'project context settings need no restart');
    assert.equal(client.stopped, false);
  } finally {
    vscode.workspace.workspaceFolders = undefined;
    delete vscode.folderConfig['/w/lib'];
    delete vscode.config['codecue.excludeGlobs'];
    delete vscode.config['codecue.maxIndexedFiles'];
  }
});

test('the client is not pinned to one folder, so it sends every workspace folder', async () => {
  const client = await activated();
  // vscode-languageclient registers its WorkspaceFoldersFeature only without clientOptions.workspaceFolder.
  assert.equal(client.clientOptions.workspaceFolder, undefined);
});

test('progress from the server shows in the status bar, and again after a crash and restart', async () => {
  const client = await activated();
  const progress = client.clientOptions.middleware.handleWorkDoneProgress;
  const notShown = () => assert.fail('VS Code\'s own progress item should not show as well');
  progress('codecue-load-1', { kind: 'begin', message: 'loading model pair tiny', percentage: 0 }, notShown);
  assert.equal(vscode.statusItem.text, '$(loading~spin) CodeCue 0%');
  progress('codecue-index-1', { kind: 'begin', message: 'indexing the workspace', percentage: 0 }, notShown);
  progress('codecue-index-1', { kind: 'end', message: 'workspace indexed' }, notShown);
  assert.equal(vscode.statusItem.text, '$(loading~spin) CodeCue 0%', 'the index is not the model: still loading');
  progress('codecue-load-1', { kind: 'end', message: 'model pair tiny ready' }, notShown);
  assert.match(vscode.statusItem.text, /^\$\(check\) CodeCue/);

  client.crashAndRestart(); // the client restarts the server by itself
  assert.equal(vscode.statusItem.text, '$(loading~spin) CodeCue', 'starting again, not "stopped"');
  await provide(client, 'x = ', []); // a server that is still loading answers empty: not ready yet
  assert.equal(vscode.statusItem.text, '$(loading~spin) CodeCue');
  progress('codecue-load-2', { kind: 'begin', message: 'loading model pair tiny', percentage: 0 }, notShown);
  assert.equal(vscode.statusItem.text, '$(loading~spin) CodeCue 0%');
  progress('codecue-load-2', { kind: 'end', message: 'model pair tiny ready' }, notShown);
  assert.match(vscode.statusItem.text, /^\$\(check\) CodeCue/);
  assert.equal(FakeClient.last, client);
});

test('the same suggestion asked for again at the same place is shown once', async () => {
  const client = await activated();
  client.notifications.length = 0;
  const item = () => [{ insertText: 'foo()', range: { start: new Position(0, 4) } }];
  await provide(client, 'x = ', item());
  await provide(client, 'x = ', item()); // e.g. Escape, then CodeCue: Trigger Suggestion
  assert.deepEqual(client.notifications.map(([m]) => m), ['codecue/didShowCompletion']);
  await provide(client, 'x = ', [{ insertText: 'bar()', range: { start: new Position(0, 4) } }]);
  assert.equal(client.notifications.filter(([m]) => m === 'codecue/didShowCompletion').length, 2, 'new text: new one');
});

test('trigger and restart commands', async () => {
  const client = await activated();
  await vscode.commands.executeCommand('codecue.triggerSuggestion');
  assert.deepEqual(vscode.executed.at(-1), ['editor.action.inlineSuggest.trigger']);
  await vscode.commands.executeCommand('codecue.restartServer');
  assert.equal(client.stopped, true);
  assert.notEqual(FakeClient.last, client);
  assert.equal(FakeClient.last!.started, true);
});

test('a server path that does not exist is an error that names the path tried', async () => {
  const client = await activated();
  await vscode.workspace.getConfiguration('codecue').update('server.path', '~/nowhere/codecue-lsp');
  assert.equal(client.stopped, true);
  assert.equal(FakeClient.last, client, 'no client for a missing file');
  const shown = vscode.executed.filter(([id]) => id === 'showErrorMessage').map(([, m]) => m as string);
  assert.equal(shown.length, 1);
  assert.ok(shown[0].includes(join(home, 'nowhere', 'codecue-lsp')), shown[0]);
  assert.match(shown[0], /"~\/nowhere\/codecue-lsp".*does not exist/);
  assert.match(vscode.statusItem.text, /error/);
  await vscode.workspace.getConfiguration('codecue').update('server.path', '~/bin/codecue-lsp');
  assert.notEqual(FakeClient.last, client, 'fixing the setting starts the server');
});

test('toggle turns suggestions off without asking the server, and back on', async () => {
  const client = await activated();
  await vscode.commands.executeCommand('codecue.toggle');
  assert.equal(vscode.config['codecue.enable'], false);
  assert.match(vscode.statusItem.text, /circle-slash/);
  let asked = false;
  const off = await client.clientOptions.middleware.provideInlineCompletionItems(
    document('file:///a.py', 'x'), new Position(0, 1), {}, token, async () => { asked = true; return { items: [] }; });
  assert.deepEqual(off, []);
  assert.equal(asked, false);
  await vscode.commands.executeCommand('codecue.toggle');
  assert.equal(vscode.config['codecue.enable'], true);
  assert.equal(FakeClient.last, client, 'toggling must not restart the server');
});

test('a language switched off stops its suggestions at once, without a restart; one added restarts', async () => {
  const client = await activated();
  const config = vscode.workspace.getConfiguration('codecue');
  const languages = () => client.clientOptions.middleware.workspace.configuration(
    { items: [{ section: 'codecue' }] }, token, () => undefined)[0].enabledLanguages;
  let asked = 0;
  const ask = (languageId: string) => client.clientOptions.middleware.provideInlineCompletionItems(
    document('file:///a.x', 'x', languageId), new Position(0, 1), {}, token, async () => {
      asked++;
      return { items: [] };
    });
  try {
    await config.update('enabledLanguages', ['javascript']);
    assert.equal(FakeClient.last, client, 'switching python off must not restart the server');
    assert.equal(client.stopped, false);
    assert.deepEqual(languages(), ['javascript'], 'the server is told');
    assert.deepEqual(await ask('python'), []);
    assert.equal(asked, 0, 'python is not asked for');
    await ask('javascript');
    assert.equal(asked, 1);
    await config.update('enabledLanguages', ['javascript', 'python']);
    assert.equal(FakeClient.last, client, 'switching it on again needs no restart either');
    await ask('python');
    assert.equal(asked, 2);
    await config.update('enabledLanguages', ['python', 'ruby']);
    assert.notEqual(FakeClient.last, client, 'ruby was not in the document selector the client started with');
    assert.equal(client.stopped, true);
    assert.deepEqual(FakeClient.last!.clientOptions.documentSelector.map((f: any) => f.language),
      ['python', 'python', 'ruby', 'ruby']);
  } finally {
    await config.update('enabledLanguages', DEFAULT_LANGUAGES); // a restart: back to the default selector
    delete vscode.config['codecue.enabledLanguages'];
  }
});

test('a server the client gave up on shows as crashed, and a click on the status item restarts it', async () => {
  const client = await activated();
  assert.equal(vscode.statusItem.command, 'codecue.statusItemClicked');
  const click = () => vscode.commands.executeCommand(vscode.statusItem.command);
  client.crashAndGiveUp();
  assert.match(vscode.statusItem.text, /crashed/);
  assert.match(vscode.statusItem.tooltip, /Click to restart/);
  await click();
  const again = FakeClient.last!;
  assert.notEqual(again, client, 'restarted');
  assert.equal(again.started, true);
  assert.equal(vscode.config['codecue.enable'], true, 'suggestions stay on');
  assert.doesNotMatch(vscode.statusItem.text, /crashed/);
  await click(); // running: a click turns suggestions off, and on again
  assert.equal(vscode.config['codecue.enable'], false);
  assert.equal(FakeClient.last, again);
  await click();
  assert.equal(vscode.config['codecue.enable'], true);
});

test('changing the pair restarts the server', async () => {
  const client = await activated();
  await vscode.workspace.getConfiguration('codecue').update('pair', 'default');
  assert.equal(client.stopped, true);
  assert.notEqual(FakeClient.last, client);
  assert.equal(FakeClient.last!.clientOptions.initializationOptions.pair, 'default');
});

const rested = () => new Promise((resolve) => setTimeout(resolve, REST_MS + 100));

function moves(client: FakeClient) {
  return client.notifications.filter(([m]) => m === 'codecue/didMoveCursor').map(([, p]) => p);
}

test('where the cursor rests after opening, switching and clicking goes to the server; typing does not', async () => {
  await activated();
  const client = FakeClient.last!;
  assert.equal(client.isRunning(), true);
  const doc = document('file:///b.py', 'x = 1');
  await open(vscode, doc);
  const b = editor(doc, 0, 2);
  client.notifications.length = 0;
  await focus(vscode, b); // opened in an editor
  await rested();
  assert.deepEqual(moves(client), [
    { textDocument: { uri: 'file:///b.py', version: 1 }, position: { line: 0, character: 2 } },
  ]);

  doc.version = 2; // a key typed: VS Code changes the document, then the selection
  await moveCursor(vscode, b, 0, 3);
  await rested();
  assert.equal(moves(client).length, 1, 'typing is not a move');

  await moveCursor(vscode, b, 0, 5); // a click
  await moveCursor(vscode, b, 0, 1); // and another before the rest ends
  await moveCursor(vscode, editor(document('file:///notes.rb', '', 'ruby')), 0, 0); // in a split, not the user's
  await rested();
  assert.deepEqual(moves(client).slice(1), [
    { textDocument: { uri: 'file:///b.py', version: 2 }, position: { line: 0, character: 1 } },
  ]);

  await vscode.workspace.getConfiguration('codecue').update('prepareAtCursor', false);
  assert.equal(client.clientOptions.middleware.workspace.configuration(
    { items: [{ section: 'codecue' }] }, token, () => undefined)[0].prepareAtCursor, false, 'the server is told too');
  await moveCursor(vscode, b, 0, 4);
  await focus(vscode, editor(document('file:///c.py', ''), 0, 0));
  await rested();
  assert.equal(moves(client).length, 2, 'prepareAtCursor off: nothing is sent');
  await vscode.workspace.getConfiguration('codecue').update('prepareAtCursor', true);

  vscode.window.activeTextEditor = b;
  client.crashAndRestart(); // a new server process has nothing prepared: the cursor goes again, once
  await rested();
  assert.deepEqual(moves(client).slice(2).map((p) => p.textDocument), [{ uri: 'file:///b.py', version: 2 }]);
});
