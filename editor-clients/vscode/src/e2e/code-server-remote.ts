// Issue 11's "done means", in VS Code 1.100 (code-server 4.100.3 + headless chromium): the extension starts
// codecue-lsp with "codecue.server.args": ["--engine", "http://127.0.0.1:PORT/v1"] against a real llama-server serving
// the default pair (1.5B target + 0.5B draft; editor-clients/testing/llama_server.py starts it with docs/deploy.md's
// recipe). A real completion shows as ghost text, Tab accepts it, the saved file holds it; then a keystroke while
// llama-server generates a long answer makes llama-server cancel that task (its log and /slots).
//
//   node out/e2e/code-server-remote.js     (editor-clients/test-remote.sh builds and runs it)
// Env: CODE_SERVER_DIR, CODECUE_PYTHON (its venv's bin/ holds codecue-lsp), CHROMIUM, CODECUE_ARTIFACTS.
// Needs scripts/build-llama-cpp.sh's build and `codecue-models fetch`; fails naming them when they are missing.
import { strict as assert } from 'node:assert';
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Page } from 'playwright-core';
import {
  CodeServer, EXTENSION_DIR, ghostText, logger, openFile, PYTHON, quietEditorSettings, readyItem, REPO,
  startCodeServer, waitForHttp,
} from './harness';

const ARTIFACTS = process.env.CODECUE_ARTIFACTS ?? join(EXTENSION_DIR, 'test-artifacts');
const HELPER = join(REPO, 'editor-clients', 'testing', 'llama_server.py');
const PORT = 19000 + (process.pid % 1000);
const LLAMA_PORT = PORT + 1000;
const ENGINE = `http://127.0.0.1:${LLAMA_PORT}`;
const HANG_GUARD_MS = 180_000; // only a hang guard: the 1.5B and its draft share two CPU cores with everything else
const ORIGINAL = 'def fibonacci(n):\n    if n <= 1:\n        return n';
const TYPED = 'return fib';
// A long list: on a new line under the first row the server asks for a block, which the model fills row after row.
const PRIMES = '# the first 500 prime numbers\nPRIMES = [\n    2, 3, 5, 7, 11, 13, 17, 19, 23, 29,\n]\n';
const log = logger('code-server remote e2e');

interface Slot {
  id_task?: number; // absent until the first task
  is_processing: boolean;
  next_token: { n_decoded: number; has_next_token: boolean }[];
}

async function slot(): Promise<Slot> {
  const res = await fetch(`${ENGINE}/slots`);
  return ((await res.json()) as Slot[])[0];
}

// The probe's first truthy value, polled every 50 ms; undefined after timeoutMs.
async function poll<T>(probe: () => Promise<T | undefined | false>, timeoutMs: number): Promise<T | undefined> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) return undefined;
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function until<T>(what: string, probe: () => Promise<T | undefined | false>): Promise<T> {
  const value = await poll(probe, HANG_GUARD_MS);
  if (!value) throw new Error(`timed out after ${HANG_GUARD_MS / 1000} s waiting for ${what}`);
  return value;
}

function startLlamaServer(logFile: string): ChildProcess {
  try {
    execFileSync(PYTHON, [HELPER, 'check'], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, PYTHONPATH: REPO } });
  } catch (err) {
    const stderr = (err as { stderr?: Buffer }).stderr?.toString().trim();
    throw new Error(`cannot run against llama-server:\n${stderr || err}`);
  }
  log(`starting llama-server (default pair, 1.5B + 0.5B draft) on ${ENGINE}`);
  const out = openSync(logFile, 'w');
  return spawn(PYTHON, [HELPER, 'serve', '--port', String(LLAMA_PORT)],
    { detached: true, stdio: ['ignore', out, out], env: { ...process.env, PYTHONPATH: REPO } });
}

async function typeAndWaitForGhost(page: Page, text: string): Promise<string> {
  await page.keyboard.type(text, { delay: 40 });
  await page.locator('.monaco-editor .ghost-text-decoration').first().waitFor({ timeout: HANG_GUARD_MS });
  await page.waitForTimeout(300); // let every part of the suggestion render
  return ghostText(page);
}

async function run(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'codecue-code-server-remote-'));
  const project = join(work, 'project');
  const file = join(project, 'example.py');
  const serverLog = join(work, 'server.log');
  const llamaLog = join(work, 'llama-server.log');
  mkdirSync(project);
  mkdirSync(ARTIFACTS, { recursive: true });
  writeFileSync(file, ORIGINAL);
  writeFileSync(join(project, 'primes.py'), PRIMES);
  let llama: ChildProcess | undefined;
  let editor: CodeServer | undefined;
  try {
    const serverPath = join(dirname(PYTHON), 'codecue-lsp'); // the venv's console script, as the README installs it
    if (!existsSync(serverPath)) throw new Error(`${serverPath} missing: pip install -e . into that venv (make venv)`);
    llama = startLlamaServer(llamaLog);
    try {
      await waitForHttp(`${ENGINE}/health`, 300_000); // 503 while the models load
    } catch (err) {
      throw new Error(`${err}\n${readFileSync(llamaLog, 'utf8').slice(-3000)}`);
    }
    const settings = {
      'codecue.server.path': serverPath,
      'codecue.server.args': ['--engine', `${ENGINE}/v1`, '--log-level', 'INFO', '--log-file', serverLog],
      'codecue.server.env': { PYTHONPATH: REPO },
      // Room for a long answer (the primes below); the fib completion is one line, which ends by itself.
      'codecue.maxTokens': 1000,
      ...quietEditorSettings(),
    };
    log(`codecue.server.args: ${JSON.stringify(settings['codecue.server.args'].slice(0, 2))}`);
    editor = await startCodeServer({ work, project, settings, port: PORT, log });
    const { page } = editor;
    await openFile(page, 'example.py');
    log('waiting for CodeCue to be ready (status bar)');
    await readyItem(page).waitFor({ timeout: HANG_GUARD_MS });
    assert.match(readFileSync(serverLog, 'utf8'), new RegExp(`remote engine ${ENGINE}/v1`),
      `the server should use llama-server, not load a model; its log:\n${readFileSync(serverLog, 'utf8').slice(-3000)}`);

    // --- a real completion: ghost text, Tab, the file on disk ---
    const taskBefore = (await slot()).id_task;
    await page.locator('.monaco-editor .view-lines').first().click();
    await page.keyboard.press('Control+End');
    await page.keyboard.press('Enter'); // VS Code keeps the indentation of the `return n` line...
    await page.keyboard.press('Shift+Tab'); // ...so step out of the if block
    const ghost = await typeAndWaitForGhost(page, TYPED);
    log(`ghost text: ${JSON.stringify(ghost)}`);
    assert.notEqual((await slot()).id_task, taskBefore, 'llama-server ran no task for the completion');
    assert.ok((TYPED + ghost).includes('fibonacci(n'), `not the recursion the real pair writes: ${JSON.stringify(ghost)}`);
    await page.screenshot({ path: join(ARTIFACTS, 'vscode-remote-ghost-text.png') });
    await page.keyboard.press('Tab');
    await page.keyboard.press('Control+S');
    const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    const whole = new RegExp(`^${escape(ORIGINAL)}\\n[ \\t]*${escape(TYPED + ghost)}(\\n|$)`);
    let saved = '';
    await until('the saved file to hold the accepted ghost text', async () => {
      saved = readFileSync(file, 'utf8');
      return whole.test(saved);
    });
    log(`saved file: ${JSON.stringify(saved)}`);
    await page.screenshot({ path: join(ARTIFACTS, 'vscode-remote-accepted.png') });
    assert.match(readFileSync(serverLog, 'utf8'), /completion accepted/, 'the server should count the accept');

    // --- cancel on keystroke, seen by the engine ---
    await openFile(page, 'primes.py');
    await page.locator('.monaco-editor .view-lines').first().click();
    await page.keyboard.press('Control+Home');
    await page.keyboard.press('ArrowDown');
    await page.keyboard.press('ArrowDown');
    await page.keyboard.press('End');
    // An indented empty line in the list: a request for a block of rows. An answer that ends within 5 tokens (the
    // model may close the list) is never seen generating: ask again on a new line, up to 3 times (one CI run of
    // several timed out here waiting for the first).
    let seen: Slot | undefined;
    for (let attempt = 1; attempt <= 3 && !seen; attempt++) {
      await page.keyboard.press('Enter');
      seen = await poll(async () => {
        const s = await slot();
        return s.is_processing && s.next_token[0].n_decoded >= 5 && s;
      }, HANG_GUARD_MS / 3);
      if (!seen) log(`attempt ${attempt}: llama-server not seen generating 5+ tokens; asking again on a new line`);
    }
    if (!seen) throw new Error('llama-server was never seen generating for a request, in 3 tries');
    const busy = seen;
    log(`llama-server task ${busy.id_task} generating (${busy.next_token[0].n_decoded} tokens); typing "3"`);
    await page.keyboard.type('3');
    await until(`llama-server to stop task ${busy.id_task}`, async () => {
      const s = await slot();
      return !(s.is_processing && s.id_task === busy.id_task);
    });
    assert.ok(readFileSync(llamaLog, 'utf8').includes(`cancel task, id_task = ${busy.id_task}`),
      `llama-server finished task ${busy.id_task} instead of cancelling it`);
    await until('the slot to go idle (the one-line request for "3" ends by itself)', async () => !(await slot()).is_processing);
    log(`task ${busy.id_task} cancelled at the engine after the keystroke; slot idle`);
    log('PASS: --engine URL from codecue.server.args, real ghost text, Tab, saved file, cancel seen by llama-server');
  } finally {
    await editor?.stop();
    if (llama?.pid) {
      try {
        process.kill(-llama.pid, 'SIGTERM');
      } catch {
        // already gone
      }
    }
    rmSync(work, { recursive: true, force: true });
  }
}

run().catch((err) => {
  console.error(`[code-server remote e2e] FAIL: ${err instanceof Error ? err.stack : err}`);
  process.exit(1);
});
