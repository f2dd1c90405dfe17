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

test('every setting in package.json has the default readSettings falls back to', () => {
  const pkg = JSON.parse(readFileSync(join(__dirname, '..', '..', 'package.json'), 'utf8'));
  const props: Record<string, { default: unknown }> = pkg.contributes.configuration.properties;
  const fields: Record<string, keyof ReturnType<typeof readSettings>> = {
    'codecue.server.path': 'serverPath', 'codecue.server.args': 'serverArgs', 'codecue.server.env': 'serverEnv',
  };
  const defaults = readSettings(reader({}));
  const declared = Object.keys(props);
  assert.ok(declared.length >= 12, 'could not read the settings from package.json');
  for (const key of declared) {
    const field = fields[key] ?? (key.slice('codecue.'.length) as keyof typeof defaults);
    assert.ok(field in defaults, `${key} is declared but never read`);
    assert.deepEqual(defaults[field], props[key].default, key);
  }
  for (const field of Object.keys(defaults)) {
    const key = Object.keys(fields).find((k) => fields[k] === field) ?? `codecue.${field}`;
    assert.ok(key in props, `${field} is read but not declared in package.json`);
  }
});

test('drafter, middleFrom, nextLine, prepareAtCursor, promptTokens, coldPromptTokens and engine reach the server; remoteModel only when set', () => {
  const base = serverSettings(readSettings(reader({})));
  assert.equal(base.drafter, 'auto');
  assert.equal(base.middleFrom, 'line');
  assert.equal(base.nextLine, true);
  assert.equal(serverSettings(readSettings(reader({ nextLine: false }))).nextLine, false);
  assert.equal(base.prepareAtCursor, true);
  assert.equal(serverSettings(readSettings(reader({ prepareAtCursor: false }))).prepareAtCursor, false);
  // 0 (the default) asks the server to size prompts itself; a number is sent as is.
  assert.equal(base.promptTokens, 'auto');
  assert.equal(serverSettings(readSettings(reader({ promptTokens: 768 }))).promptTokens, 768);
  assert.equal(serverSettings(readSettings(reader({ promptTokens: 100 }))).promptTokens, 256); // the server's least
  assert.equal(base.coldPromptTokens, 'auto');
  assert.equal(serverSettings(readSettings(reader({ coldPromptTokens: 640 }))).coldPromptTokens, 640);
  assert.equal(serverSettings(readSettings(reader({ coldPromptTokens: 50 }))).coldPromptTokens, 128);
  assert.equal(base.engine, 'local');
  assert.ok(!('remoteModel' in base));
  const remote = serverSettings(readSettings(reader({
    engine: ' http://10.0.0.5:8000/v1 ', remoteModel: 'qwen-coder', middleFrom: 'cursor', drafter: 'none',
  })));
  assert.equal(remote.engine, 'http://10.0.0.5:8000/v1');
  assert.equal(remote.remoteModel, 'qwen-coder');
  assert.equal(remote.middleFrom, 'cursor');
  assert.equal(remote.drafter, 'none');
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
  assert.equal(needsRestart(base, readSettings(reader({ engine: 'http://127.0.0.1:8080/v1' }))), true);
  assert.equal(needsRestart(base, readSettings(reader({ remoteModel: 'other' }))), true);
  assert.equal(needsRestart(base, readSettings(reader({ maxTokens: 16, debounceMs: 0, enable: false }))), false);
  assert.equal(needsRestart(base, readSettings(reader({ drafter: 'none', middleFrom: 'cursor', nextLine: false, prepareAtCursor: false, promptTokens: 512, coldPromptTokens: 256 }))), false);
});
