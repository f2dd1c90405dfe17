// The real codecue-lsp (tiny random model pair) spoken to over stdio the way vscode-languageclient does:
// initialize with initializationOptions, $/progress while the model loads, inlineCompletion, the codecue/*
// notifications (built by the extension's own Tracker and CursorRest), codecue.stats, and cancellation.
// Needs Python with the project importable: CODECUE_PYTHON, else <repo>/.venv/bin/python.
import { strict as assert } from 'node:assert';
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, test } from 'node:test';
import {
  CancellationTokenSource,
  createProtocolConnection,
  ProtocolConnection,
  StreamMessageReader,
  StreamMessageWriter,
  WorkDoneProgress,
} from 'vscode-languageserver-protocol/node';

import { CursorRest } from '../cursor-rest';
import { textAtCursor, Tracker } from '../telemetry';

const REPO = resolve(__dirname, '..', '..', '..', '..');
const PYTHON = process.env.CODECUE_PYTHON ?? join(REPO, '.venv', 'bin', 'python');
const URI = 'file:///tmp/codecue-e2e/example.py';
const TEXT = 'def add(a, b):\n    total = a + b\n    return ';

let server: ChildProcess;
let connection: ProtocolConnection;
let workDir: string;
const progress: { kind: string; message?: string }[] = [];
let loaded: Promise<void>;

function inlineCompletion(line: number, character: number, source?: CancellationTokenSource) {
  const params = { textDocument: { uri: URI }, position: { line, character }, context: { triggerKind: 2 } };
  // With a string method, an undefined token would be sent as a second parameter: pass it only when there is one.
  const sent = source
    ? connection.sendRequest('textDocument/inlineCompletion', params, source.token)
    : connection.sendRequest('textDocument/inlineCompletion', params);
  return sent as Promise<{ items: { insertText: string; range?: any }[] }>;
}

function stats(): Promise<Record<string, any>> {
  return connection.sendRequest('workspace/executeCommand', { command: 'codecue.stats', arguments: [] }) as any;
}

before(async () => {
  assert.ok(existsSync(PYTHON), `no Python at ${PYTHON}: set CODECUE_PYTHON`);
  workDir = mkdtempSync(join(tmpdir(), 'codecue-vscode-e2e-'));
  const env = { ...process.env, PYTHONPATH: REPO };
  execFileSync(PYTHON, ['-m', 'engine.testing', workDir], { env, stdio: 'ignore' });
  server = spawn(PYTHON, ['-m', 'codecue_lsp', '--stdio'], {
    env: {
      ...env, CODECUE_HOME: join(workDir, 'home'), CODECUE_MODELS_TOML: join(workDir, 'models.toml'),
      CODECUE_DTYPE: 'float32', CODECUE_TEST_STEP_DELAY_MS: '100', // slow steps: requests can be cancelled mid-way
    },
    stdio: ['pipe', 'pipe', 'ignore'],
  });
  connection = createProtocolConnection(new StreamMessageReader(server.stdout!), new StreamMessageWriter(server.stdin!));
  loaded = new Promise((done) => {
    connection.onRequest('window/workDoneProgress/create', ({ token }: { token: string }) => {
      connection.onProgress(WorkDoneProgress.type, token, (value) => {
        progress.push(value);
        if (value.kind === 'end') done();
      });
      return null;
    });
  });
  connection.listen();
  const init: any = await connection.sendRequest('initialize', {
    processId: process.pid, rootUri: null, capabilities: { window: { workDoneProgress: true } },
    initializationOptions: { pair: 'tiny', maxTokens: 8 }, // what the extension sends from its settings
  });
  assert.ok(init.capabilities.inlineCompletionProvider, 'the server must advertise inlineCompletionProvider');
  await connection.sendNotification('initialized', {});
  await connection.sendNotification('textDocument/didOpen', {
    textDocument: { uri: URI, languageId: 'python', version: 1, text: TEXT },
  });
});

after(async () => {
  try {
    await connection.sendRequest('shutdown');
    await connection.sendNotification('exit');
  } finally {
    connection.dispose();
    server.kill();
    rmSync(workDir, { recursive: true, force: true });
  }
});

test('the model load is reported with $/progress and the tiny pair gets ready', async () => {
  await loaded;
  assert.equal(progress[0].kind, 'begin');
  assert.match(progress[progress.length - 1].message ?? '', /ready/);
  const s = await stats();
  assert.equal(s.ready, true);
  assert.equal(s.pair, 'tiny');
});

test('inlineCompletion answers a list whose item range starts on the cursor line', async () => {
  await loaded;
  const result = await inlineCompletion(2, 11);
  assert.ok(Array.isArray(result.items));
  assert.ok(result.items.length > 0, 'the tiny pair answered nothing for this prefix');
  const item = result.items[0];
  assert.equal(typeof item.insertText, 'string');
  assert.equal(item.range.start.line, 2);
  assert.ok(item.range.start.character <= 11 && item.range.end.character >= 11);
});

test('show and accept notifications are counted by the server, with the accepted length', async () => {
  await loaded;
  const before = await stats();
  const place = { uri: URI, line: 2, before: '    return ' };
  const item = (await inlineCompletion(2, 11)).items[0];
  const text = textAtCursor(item.insertText, item.range?.start.character, place);
  assert.ok(text, 'the item should continue the line');
  const tracker = new Tracker((method, params) => void connection.sendNotification(method, params));
  const [id] = tracker.provided(place, [text]);
  tracker.accepted(URI, id);
  tracker.provided(place, [text]);
  tracker.requested({ ...place, before: place.before + '#' }); // typed something else: rejected
  const after = await stats();
  assert.equal(after.shown - before.shown, 2);
  assert.equal(after.accepted - before.accepted, 1);
  assert.equal(after.rejected - before.rejected, 1);
  assert.equal(after.accepted_chars - before.accepted_chars, [...text].length);
});

test('$/cancelRequest stops a running completion and the server keeps serving', async () => {
  await loaded;
  const before = await stats();
  const source = new CancellationTokenSource();
  const pending = inlineCompletion(1, 9, source);
  // Past the debounce, inside the first slow engine step: the tiny pair's answer here can be a token or two long,
  // so a later cancel could come after it (a cancel before the engine starts counts as cancelled too).
  await new Promise((r) => setTimeout(r, 120));
  source.cancel();
  const outcome = await pending.then((r) => r, (e) => e);
  const cancelled = outcome?.code === -32800 || (Array.isArray(outcome?.items) && outcome.items.length === 0);
  assert.ok(cancelled, `expected RequestCancelled or an empty list, got ${JSON.stringify(outcome)}`);
  const after = await stats();
  assert.equal(after.cancelled - before.cancelled, 1);
  const again = await inlineCompletion(2, 11);
  assert.ok(again.items.length > 0);
});

test('a document change supersedes the request in flight', async () => {
  await loaded;
  const insert = (version: number, line: number, character: number, text: string) =>
    connection.sendNotification('textDocument/didChange', {
      textDocument: { uri: URI, version },
      contentChanges: [{ range: { start: { line, character }, end: { line, character } }, text }],
    });
  await insert(2, 2, 11, 'a\n    y = b'); // a place never asked about, so no type-through answer is cached
  const before = await stats();
  const pending = inlineCompletion(3, 9);
  await new Promise((r) => setTimeout(r, 150));
  await insert(3, 3, 9, 'c');
  const outcome = await pending.then((r) => r, (e) => e);
  const stale = outcome?.code === -32800 || (Array.isArray(outcome?.items) && outcome.items.length === 0);
  assert.ok(stale, `the old request must not answer text for the old document: ${JSON.stringify(outcome)}`);
  const after = await stats();
  assert.ok(after.superseded > before.superseded);
});

test('a cursor at rest (codecue/didMoveCursor from CursorRest) has its prompt prepared by the server', async () => {
  await loaded;
  const before = await stats();
  // Version 3: after the edits of the test above.
  const at = { uri: URI, version: 3, line: 0, character: 4, cursors: 1, empty: true, served: true };
  const rest = new CursorRest({
    active: () => at,
    switches: () => ({ enable: true, prepareAtCursor: true, running: true }),
    send: (params) => void connection.sendNotification('codecue/didMoveCursor', params),
  });
  rest.focused(at);
  const deadline = Date.now() + 30_000; // it waits for the background work still running from the tests above
  let now = before;
  while ((now.warmup_started ?? 0) <= (before.warmup_started ?? 0) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 200));
    now = await stats();
  }
  assert.ok('warmup_started' in now, `codecue.stats has no warmup counters: ${JSON.stringify(now)}`);
  assert.equal(now.warmup_started - before.warmup_started, 1);
});
