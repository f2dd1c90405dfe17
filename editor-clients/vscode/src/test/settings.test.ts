import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { documentSelector, needsRestart, readSettings, serverSettings } from '../settings';

function reader(values: Record<string, unknown>) {
  return { get: <T>(key: string, fallback: T): T => (key in values ? (values[key] as T) : fallback) };
}

test('defaults start codecue-lsp from PATH with the default pair', () => {
  const s = readSettings(reader({}));
  assert.equal(s.serverPath, 'codecue-lsp');
  assert.deepEqual(s.serverArgs, []);
  assert.equal(s.pair, 'default');
  assert.equal(s.enable, true);
});

test('--stdio in the args is dropped because the client adds it', () => {
  const s = readSettings(reader({ 'server.args': ['--stdio', '--device', 'cpu'], 'server.path': '  ' }));
  assert.deepEqual(s.serverArgs, ['--device', 'cpu']);
  assert.equal(s.serverPath, 'codecue-lsp'); // blank path falls back to the default
});

test('the server gets only settings it knows (codecue_lsp/config.py)', () => {
  const configPy = readFileSync(join(__dirname, '..', '..', '..', '..', 'codecue_lsp', 'config.py'), 'utf8');
  const parsers = configPy.slice(configPy.indexOf('_PARSERS = {'));
  const known = [...parsers.slice(0, parsers.indexOf('}')).matchAll(/"(\w+)":/g)].map((m) => m[1]);
  const sent = Object.keys(serverSettings(readSettings(reader({}))));
  const snake = (k: string) => k.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase());
  assert.ok(known.length > 3, 'could not read the server settings table');
  for (const key of sent) {
    assert.ok(known.includes(snake(key)), `${key} is not a server setting`);
  }
});

test('documents of enabled languages go to the server, files and unsaved ones', () => {
  const sel = documentSelector(readSettings(reader({ enabledLanguages: ['python', 'go'] })));
  assert.deepEqual(sel, [
    { scheme: 'file', language: 'python' }, { scheme: 'untitled', language: 'python' },
    { scheme: 'file', language: 'go' }, { scheme: 'untitled', language: 'go' },
  ]);
});

test('process settings need a restart, per-request ones do not', () => {
  const base = readSettings(reader({}));
  assert.equal(needsRestart(base, readSettings(reader({ pair: 'tiny' }))), true);
  assert.equal(needsRestart(base, readSettings(reader({ 'server.path': '/venv/bin/codecue-lsp' }))), true);
  assert.equal(needsRestart(base, readSettings(reader({ maxTokens: 16, debounceMs: 0, enable: false }))), false);
});
