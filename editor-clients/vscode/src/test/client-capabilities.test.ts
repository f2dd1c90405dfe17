// What the pinned vscode-languageclient tells the server about the workspace, read from its own features (with a
// mocked vscode API): the project index needs the workspace folders and file-change notifications it can register.
import { strict as assert } from 'node:assert';
import { dirname, join } from 'node:path';
import { test } from 'node:test';

import { createVscode, install } from '../testing/mock-vscode';

const vscode = createVscode();
Object.assign(vscode, { CancellationError: class extends Error {} }); // what the features' module needs to load
install(vscode);
// The package exports only its entry points: the features are loaded by path, next to the one LanguageClient uses.
const common = join(dirname(require.resolve('vscode-languageclient/node')), '..', 'common');
/* eslint-disable @typescript-eslint/no-var-requires */
const { FileSystemWatcherFeature } = require(join(common, 'fileSystemWatcher'));
const { WorkspaceFoldersFeature } = require(join(common, 'workspaceFolder'));
/* eslint-enable @typescript-eslint/no-var-requires */

const client = { code2ProtocolConverter: { asUri: (uri: { toString(): string }) => uri.toString() } };

test('the client advertises didChangeWatchedFiles with dynamic registration', () => {
  const capabilities: Record<string, any> = {};
  new FileSystemWatcherFeature(client, () => undefined).fillClientCapabilities(capabilities);
  assert.equal(capabilities.workspace.didChangeWatchedFiles.dynamicRegistration, true);
});

test('initialize carries every workspace folder, and workspaceFolders support is advertised', () => {
  const folders = [
    { uri: { toString: () => 'file:///w/app' }, name: 'app', index: 0 },
    { uri: { toString: () => 'file:///w/lib' }, name: 'lib', index: 1 },
  ];
  (vscode.workspace as any).workspaceFolders = folders;
  const feature = new WorkspaceFoldersFeature(client);
  const params: Record<string, any> = {};
  feature.fillInitializeParams(params);
  assert.deepEqual(params.workspaceFolders, [{ uri: 'file:///w/app', name: 'app' }, { uri: 'file:///w/lib', name: 'lib' }]);
  const capabilities: Record<string, any> = {};
  feature.fillClientCapabilities(capabilities);
  assert.equal(capabilities.workspace.workspaceFolders, true);
});
