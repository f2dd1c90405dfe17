import { strict as assert } from 'node:assert';
import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

import { expandPath, resolveServer } from '../server-path';

const places = { home: '/home/ann', workspaceFolder: '/work/proj' };

const expansions: [string, string][] = [
  ['~/.venv/bin/codecue-lsp', '/home/ann/.venv/bin/codecue-lsp'],
  ['~', '/home/ann'],
  ['${userHome}/bin/codecue-lsp', '/home/ann/bin/codecue-lsp'],
  ['${workspaceFolder}/.venv/bin/codecue-lsp', '/work/proj/.venv/bin/codecue-lsp'],
  ['/opt/~/x', '/opt/~/x'], // only a leading ~ is the home
  ['~bob/x', '~bob/x'], // other users' homes are not looked up
  ['codecue-lsp', 'codecue-lsp'],
];
for (const [setting, expected] of expansions) {
  test(`expandPath ${setting}`, () => assert.equal(expandPath(setting, places), expected));
}

test('${workspaceFolder} with no folder open stays, and resolving says why', () => {
  assert.equal(expandPath('${workspaceFolder}/x', { home: '/h' }), '${workspaceFolder}/x');
  const r = resolveServer('${workspaceFolder}/x', { home: '/h' }, '/usr/bin');
  assert.ok('error' in r && /no folder is open/.test(r.error));
});

function tree() {
  const root = mkdtempSync(join(tmpdir(), 'codecue-path-'));
  mkdirSync(join(root, 'bin'));
  mkdirSync(join(root, 'proj', '.venv', 'bin'), { recursive: true });
  for (const file of ['bin/codecue-lsp', 'proj/.venv/bin/codecue-lsp']) {
    writeFileSync(join(root, file), '#!/bin/sh\n');
    chmodSync(join(root, file), 0o755);
  }
  writeFileSync(join(root, 'bin', 'plain'), 'not executable');
  return root;
}

test('a ~ path to an existing executable resolves to the absolute file', () => {
  const root = tree();
  assert.deepEqual(resolveServer('~/bin/codecue-lsp', { home: root }, ''), { command: join(root, 'bin', 'codecue-lsp') });
});

test('a missing file: the error names the setting and the path tried', () => {
  const root = tree();
  const r = resolveServer('~/.venv/bin/codecue-lsp', { home: root }, '');
  assert.ok('error' in r);
  assert.equal(r.error,
    `codecue.server.path "~/.venv/bin/codecue-lsp" (${root}/.venv/bin/codecue-lsp): ${root}/.venv/bin/codecue-lsp does not exist`);
});

test('a file that is not executable, and a directory, are errors too', () => {
  const root = tree();
  const plain = resolveServer(join(root, 'bin', 'plain'), { home: root }, '');
  assert.ok('error' in plain && plain.error.endsWith('is not executable'));
  const dir = resolveServer(join(root, 'bin'), { home: root }, '');
  assert.ok('error' in dir && dir.error.endsWith('is not a file'));
});

test('a relative path is taken from the workspace folder', () => {
  const root = tree();
  const r = resolveServer('.venv/bin/codecue-lsp', { home: '/h', workspaceFolder: join(root, 'proj') }, '');
  assert.deepEqual(r, { command: join(root, 'proj', '.venv', 'bin', 'codecue-lsp') });
});

test('a bare name is looked up on the PATH the server gets', () => {
  const root = tree();
  assert.deepEqual(resolveServer('codecue-lsp', { home: '/h' }, `/nonexistent:${join(root, 'bin')}`), { command: 'codecue-lsp' });
  const r = resolveServer('codecue-lsp', { home: '/h' }, '/nonexistent');
  assert.ok('error' in r && /"codecue-lsp" is not on PATH/.test(r.error));
});
