// Screenshot of CodeCue in VS Code 1.100 (code-server 4.100.3 + headless chromium), for docs/vscode.png: the real
// codecue-lsp on the local engine with the default pair (`codecue-models fetch` first; the first load may calibrate
// for a few minutes), a small Python file, the start of a line typed, the ghost text on screen.
//
//   node out/e2e/screenshot.js [--out ../../docs/vscode.png] [--typed "return fib"] [--pair default]
// Env: CODE_SERVER_DIR, CODECUE_PYTHON (its venv's bin/ holds codecue-lsp), CHROMIUM.
import { strict as assert } from 'node:assert';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import {
  CodeServer, ghostText, logger, openFile, PYTHON, quietEditorSettings, readyItem, REPO, startCodeServer,
} from './harness';

const ORIGINAL = 'def fibonacci(n):\n    if n <= 1:\n        return n';
const LOAD_GUARD_MS = 900_000; // only a hang guard: loading (and a first calibration) of the real pair on 2 cores
const log = logger('vscode screenshot');

async function run(): Promise<void> {
  const { values } = parseArgs({
    options: {
      out: { type: 'string', default: join(REPO, 'docs', 'vscode.png') },
      typed: { type: 'string', default: 'return fib' },
      pair: { type: 'string', default: 'default' },
    },
  });
  const out = resolve(values.out!);
  const work = mkdtempSync(join(tmpdir(), 'codecue-vscode-shot-'));
  const project = join(work, 'project');
  mkdirSync(project);
  writeFileSync(join(project, 'example.py'), ORIGINAL);
  let editor: CodeServer | undefined;
  try {
    const serverPath = join(dirname(PYTHON), 'codecue-lsp');
    if (!existsSync(serverPath)) throw new Error(`${serverPath} missing: pip install -e . into that venv (make venv)`);
    const settings = {
      'codecue.server.path': serverPath,
      'codecue.server.env': { PYTHONPATH: REPO },
      'codecue.pair': values.pair,
      'codecue.maxTokens': 48,
      ...quietEditorSettings(),
    };
    editor = await startCodeServer({ work, project, settings, port: 17000 + (process.pid % 1000), log });
    const { page } = editor;
    await openFile(page, 'example.py');
    log(`waiting for the ${values.pair} pair to load (status bar)`);
    await readyItem(page).waitFor({ timeout: LOAD_GUARD_MS });
    await page.locator('.monaco-editor .view-lines').first().click();
    await page.keyboard.press('Control+End');
    await page.keyboard.press('Enter'); // VS Code keeps the indentation of the `return n` line...
    await page.keyboard.press('Shift+Tab'); // ...so step out of the if block
    await page.keyboard.type(values.typed!, { delay: 40 });
    await page.locator('.monaco-editor .ghost-text-decoration').first().waitFor({ timeout: 120_000 });
    await readyItem(page).waitFor({ timeout: 10_000 }); // the status bar shows this completion's latency
    await page.waitForTimeout(500); // let every part of the suggestion render
    const ghost = await ghostText(page);
    log(`ghost text: ${JSON.stringify(ghost)}`);
    assert.ok(ghost.trim().length > 0, 'empty ghost text');
    mkdirSync(dirname(out), { recursive: true });
    await page.screenshot({ path: out });
    log(`wrote ${out}`);
  } finally {
    await editor?.stop();
    rmSync(work, { recursive: true, force: true });
  }
}

run().catch((err) => {
  console.error(`[vscode screenshot] FAIL: ${err instanceof Error ? err.stack : err}`);
  process.exit(1);
});
