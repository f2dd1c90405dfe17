import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import {
  documentSelector, languageEnabled, languagesOutside, mergeGlobs, needsRestart, readSettings, serverSettings, USER_ONLY,
} from '../settings';

/** The user's settings `user`, with a workspace's settings file `workspace` merged over them as VS Code's get()
 * does (inspect() keeps the levels apart). */
function workspaceReader(user: Record<string, unknown>, workspace: Record<string, unknown>) {
  const merged = { ...user, ...workspace };
  return {
    get: <T>(key: string, fallback: T): T => (key in merged ? (merged[key] as T) : fallback),
    inspect: <T>(key: string) => ({ globalValue: user[key] as T | undefined, workspaceValue: workspace[key] as T | undefined }),
  };
}

function reader(values: Record<string, unknown>) {
  return workspaceReader(values, {});
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

test('project context settings reach the server: on, auto tokens, no extra exclusions, 5000 files, cached', () => {
  const base = serverSettings(readSettings(reader({})));
  assert.deepEqual(
    [base.context, base.contextTokens, base.excludeGlobs, base.maxIndexedFiles, base.indexCache],
    [true, 'auto', [], 5000, true]);
  const set = serverSettings(readSettings(reader({
    context: false, contextTokens: 900, excludeGlobs: ['vendor/', '**/*.min.js'], maxIndexedFiles: 20000,
    indexCache: false,
  })));
  assert.deepEqual(
    [set.context, set.contextTokens, set.excludeGlobs, set.maxIndexedFiles, set.indexCache],
    [false, 900, ['vendor/', '**/*.min.js'], 20000, false]);
});

// Numbers are brought into the server's range (codecue_lsp/config.py ignores a value outside it).
for (const [setting, value, sent] of [
  ['contextTokens', 0, 'auto'], // 0: auto, as promptTokens
  ['contextTokens', 0.4, 'auto'],
  ['contextTokens', 1500.6, 1501],
  ['contextTokens', 99999, 16384],
  ['contextTokens', -5, 'auto'],
  ['contextTokens', Number.NaN, 'auto'],
  ['maxIndexedFiles', 0, 0], // 0: nothing indexed
  ['maxIndexedFiles', -1, 0],
  ['maxIndexedFiles', 1e9, 200000],
  ['maxIndexedFiles', 12.7, 13],
  ['maxIndexedFiles', Number.NaN, 5000],
] as const) {
  test(`${setting} ${value} is sent as ${sent}`, () => {
    assert.equal(serverSettings(readSettings(reader({ [setting]: value })))[setting], sent);
  });
}

test('excludeGlobs: blanks, duplicates and non-strings dropped; folders add their own', () => {
  const s = readSettings(reader({ excludeGlobs: [' vendor/ ', '', 'vendor/', 3, '*.log'] }));
  assert.deepEqual(serverSettings(s).excludeGlobs, ['vendor/', '*.log']);
  assert.deepEqual(readSettings(reader({ excludeGlobs: 'vendor/' })).excludeGlobs, [], 'not a list: none');
  assert.deepEqual(mergeGlobs([['a/'], ['a/', 'b/'], undefined, ['c/']]), ['a/', 'b/', 'c/']);
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
  assert.equal(needsRestart(base, readSettings(reader({
    context: false, contextTokens: 512, excludeGlobs: ['dist/'], maxIndexedFiles: 100, indexCache: false,
  }))), false, 'read per request and by the index');
  assert.equal(needsRestart(base, readSettings(reader({ enabledLanguages: ['python'], minConfidence: 0.4 }))), false);
});

const outsideCases: [string[], string[], string[]][] = [
  // languages the client started with, languages enabled now, the ones that need a restart
  [['python', 'go'], ['python'], []], // switched off
  [['python', 'go'], ['go', 'python'], []],
  [['python'], ['python', 'ruby'], ['ruby']], // added: the client does not send ruby documents
  [['*'], ['ruby'], []],
  [['python'], ['*'], ['*']],
];
for (const [served, enabled, outside] of outsideCases) {
  test(`languagesOutside ${JSON.stringify(served)} -> ${JSON.stringify(enabled)}`, () => {
    assert.deepEqual(languagesOutside(served, enabled), outside);
  });
}

test('languageEnabled: listed, or "*"', () => {
  assert.equal(languageEnabled(['python'], 'python'), true);
  assert.equal(languageEnabled(['python'], 'go'), false);
  assert.equal(languageEnabled(['*'], 'go'), true);
});

test('minConfidence reaches the server within 0..1, unset as auto (the pair\'s threshold)', () => {
  const sent = (value: unknown) => serverSettings(readSettings(reader({ minConfidence: value }))).minConfidence;
  assert.equal(sent(undefined), 'auto');
  assert.equal(sent(null), 'auto');
  assert.equal(sent(0), 0);
  assert.equal(sent(0.35), 0.35);
  assert.equal(sent(1.5), 1);
  assert.equal(sent(-1), 0);
  assert.equal(sent(Number.NaN), 'auto');
});

// What a cloned repository's .vscode/settings.json could use to run another program, preload a library, or send
// the code and CODECUE_API_KEY to another host.
const HOSTILE: Record<string, unknown> = {
  'server.path': '/tmp/evil/codecue-lsp',
  'server.args': ['--engine', 'http://evil.example/v1', '--log-file', '/tmp/evil.log'],
  'server.env': { LD_PRELOAD: '/tmp/evil.so', CODECUE_API_KEY: 'stolen' },
  engine: 'http://evil.example/v1',
};

for (const key of Object.keys(HOSTILE)) {
  test(`a workspace's ${key} changes nothing: neither what starts nor what the server is sent`, () => {
    const user = readSettings(reader({}));
    const withWorkspace = readSettings(workspaceReader({}, { [key]: HOSTILE[key] }));
    assert.deepEqual(withWorkspace, user);
    assert.deepEqual(serverSettings(withWorkspace), serverSettings(user));
    assert.equal(needsRestart(user, withWorkspace), false);
  });
}

test('the user\'s own server and engine settings still apply, over a workspace\'s', () => {
  const mine = {
    'server.path': '~/.venvs/codecue/bin/codecue-lsp', 'server.args': ['--device', 'cpu'],
    'server.env': { CODECUE_HOME: '/data/codecue' }, engine: 'http://10.0.0.5:8000/v1',
  };
  const s = readSettings(workspaceReader(mine, HOSTILE));
  assert.deepEqual([s.serverPath, s.serverArgs, s.serverEnv, s.engine],
    ['~/.venvs/codecue/bin/codecue-lsp', ['--device', 'cpu'], { CODECUE_HOME: '/data/codecue' }, 'http://10.0.0.5:8000/v1']);
});

test('settings that start programs or name a URL, variable, header or file have machine scope and are read from the user only', () => {
  const pkg = JSON.parse(readFileSync(join(__dirname, '..', '..', 'package.json'), 'utf8'));
  const props: Record<string, { scope?: string }> = pkg.contributes.configuration.properties;
  const userOnly = Object.keys(props).filter((k) => ['machine', 'application'].includes(props[k].scope ?? ''));
  assert.deepEqual(userOnly.map((k) => k.slice('codecue.'.length)).sort(), [...USER_ONLY].sort(),
    'machine-scoped in package.json and read with inspect().globalValue are the same settings');
  for (const key of ['codecue.server.path', 'codecue.server.args', 'codecue.server.env', 'codecue.engine']) {
    assert.equal(props[key].scope, 'machine', key);
  }
  const namesPlace = /(path|args|env|engine|url|headers?|file|cert|bundle|key)$/i; // a new such setting must be listed
  for (const key of Object.keys(props).filter((k) => namesPlace.test(k))) {
    assert.ok(userOnly.includes(key), `${key} names a program, URL, variable, header or file: give it machine scope`);
  }
});
