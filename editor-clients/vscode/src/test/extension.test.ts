// extension.ts wired to a mocked vscode API and a fake LanguageClient: what it starts, what the middleware does to
// the server's items, which notifications go out, and what the status bar says.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';

import { createVscode, document, FakeClient, install, Position } from '../testing/mock-vscode';

const vscode = createVscode();
install(vscode);
// eslint-disable-next-line @typescript-eslint/no-var-requires
const extension = require('../extension');

const token = { isCancellationRequested: false };
const context = { subscriptions: [] as unknown[] };

async function activated(): Promise<FakeClient> {
  if (!FakeClient.last) {
    vscode.config['codecue.server.path'] = '/venv/bin/codecue-lsp';
    vscode.config['codecue.pair'] = 'tiny';
    await extension.activate(context);
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
  assert.equal(client.serverOptions.command, '/venv/bin/codecue-lsp');
  assert.equal(client.serverOptions.transport, 0);
  assert.equal(client.clientOptions.initializationOptions.pair, 'tiny');
  assert.equal(client.started, true);
  for (const id of ['codecue.toggle', 'codecue.showLog', 'codecue.acceptNextWord', 'codecue.acceptNextLine']) {
    assert.ok(vscode.registered.has(id), id);
  }
});

test('items get the accept command, and show / accept notifications go to the server', async () => {
  const client = await activated();
  client.notifications.length = 0;
  const result = await provide(client, 'x = fo', [{ insertText: 'foo()', range: { start: new Position(0, 4) } }]);
  const item = result.items[0];
  assert.deepEqual(item.command.arguments, ['file:///a.py', 'o()']);
  await vscode.commands.executeCommand(item.command.command, ...item.command.arguments);
  assert.deepEqual(client.notifications.map(([m]) => m), ['codecue/didShowCompletion', 'codecue/didAcceptCompletion']);
  assert.equal(client.notifications[1][1].acceptedLength, 3);
  assert.match(vscode.statusItem.text, /CodeCue \d+ ms/);
});

test('the server answers workspace/configuration with server settings only', async () => {
  const client = await activated();
  const answer = client.clientOptions.middleware.workspace.configuration(
    { items: [{ section: 'codecue' }] }, token, () => assert.fail('should not ask VS Code'));
  assert.deepEqual(Object.keys(answer[0]).sort(), ['debounceMs', 'enabledLanguages', 'maxTokens', 'pair']);
});

test('progress from the server shows in the status bar', async () => {
  const client = await activated();
  client.requestHandlers.get('window/workDoneProgress/create')!({ token: 'load' });
  client.progressHandlers.get('load')!({ kind: 'begin', message: 'loading model pair tiny', percentage: 0 });
  assert.equal(vscode.statusItem.text, '$(loading~spin) CodeCue 0%');
  client.progressHandlers.get('load')!({ kind: 'end', message: 'model pair tiny ready' });
  assert.match(vscode.statusItem.text, /^\$\(check\) CodeCue/);
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

test('changing the pair restarts the server', async () => {
  const client = await activated();
  await vscode.workspace.getConfiguration('codecue').update('pair', 'default');
  assert.equal(client.stopped, true);
  assert.notEqual(FakeClient.last, client);
  assert.equal(FakeClient.last!.clientOptions.initializationOptions.pair, 'default');
});
