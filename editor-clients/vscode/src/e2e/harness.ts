// Shared by the code-server tests (code-server.ts, code-server-remote.ts) and the screenshot (screenshot.ts): VS Code
// 1.100 as code-server 4.100.3 with the built codecue.vsix installed, driven by headless Debian chromium through
// playwright-core. editor-clients/setup-lib.sh installs both.
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { Browser, chromium, Page } from 'playwright-core';

export const EXTENSION_DIR = resolve(__dirname, '..', '..');
export const REPO = resolve(EXTENSION_DIR, '..', '..');
export const CODE_SERVER = process.env.CODE_SERVER_DIR
  ?? join(homedir(), '.cache', 'codecue-editor-tests', 'code-server-4.100.3', 'node_modules', 'code-server');
export const PYTHON = process.env.CODECUE_PYTHON ?? join(REPO, '.venv', 'bin', 'python');
const ENTRY = join(CODE_SERVER, 'out', 'node', 'entry.js');

export function logger(tag: string): (message: string) => void {
  return (message) => console.log(`[${tag}] ${message}`);
}

/** Editor settings that keep VS Code's own widgets away from the inline suggestion (Tab must reach it) and the
 * workbench quiet. The codecue.* settings come on top. */
export function quietEditorSettings(): Record<string, unknown> {
  return {
    'editor.quickSuggestions': { other: 'off', comments: 'off', strings: 'off' },
    'editor.suggestOnTriggerCharacters': false,
    'editor.wordBasedSuggestions': 'off',
    'editor.autoClosingBrackets': 'never',
    'editor.autoClosingQuotes': 'never',
    'editor.inlineSuggest.enabled': true,
    'editor.minimap.enabled': false,
    'workbench.startupEditor': 'none',
    'workbench.tips.enabled': false,
    'security.workspace.trust.enabled': false,
    'telemetry.telemetryLevel': 'off',
    'extensions.ignoreRecommendations': true,
    'update.mode': 'none',
    'window.commandCenter': false,
    'chat.commandCenter.enabled': false,
    'workbench.secondarySideBar.defaultVisibility': 'hidden',
  };
}

export async function waitForHttp(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const res = await fetch(url);
      if (res.ok) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`no answer from ${url} after ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

export async function waitFor(what: string, ok: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

export async function openFile(page: Page, name: string): Promise<void> {
  await page.locator('.monaco-workbench').waitFor({ timeout: 60_000 });
  await page.keyboard.press('Control+P');
  await page.locator('.quick-input-widget input').waitFor();
  await page.keyboard.type(name);
  await page.locator(`.quick-input-list .monaco-list-row[aria-label*="${name}"]`).first().waitFor();
  await page.keyboard.press('Enter');
  await page.locator('.monaco-editor .view-lines').first().waitFor();
}

export async function runCommand(page: Page, title: string): Promise<void> {
  await page.keyboard.press('F1');
  await page.locator('.quick-input-widget input').waitFor();
  await page.keyboard.type(title);
  await page.locator(`.quick-input-list .monaco-list-row[aria-label*="${title}"]`).first().waitFor();
  await page.keyboard.press('Enter');
  await page.locator('.quick-input-widget').waitFor({ state: 'hidden' });
}

/** The ghost text on screen: VS Code may draw one suggestion as several decorations, so all of them in order. */
export async function ghostText(page: Page): Promise<string> {
  const ghost = page.locator('.monaco-editor .ghost-text-decoration');
  return (await ghost.allTextContents()).join('').replace(/\u00a0/g, ' ');
}

/** The "✓ CodeCue ..." status bar item: the server is up and its model (or engine) ready. */
export function readyItem(page: Page) {
  return page.locator('.statusbar-item:has-text("CodeCue")').filter({ has: page.locator('.codicon-check') });
}

export interface CodeServer {
  server: ChildProcess;
  browser: Browser;
  page: Page;
  /** Closes the browser and kills code-server's process group (the extension host and codecue-lsp with it). */
  stop(): Promise<void>;
}

/** Writes the user settings, installs codecue.vsix, starts code-server on the project folder (its own process
 * group) and opens it in headless chromium. `work` holds code-server's user data and extensions. */
export async function startCodeServer(options: {
  work: string; project: string; settings: Record<string, unknown>; port: number; log: (m: string) => void;
  viewport?: { width: number; height: number };
}): Promise<CodeServer> {
  const { work, project, settings, port, log } = options;
  const userData = join(work, 'user-data');
  const extensions = join(work, 'extensions');
  mkdirSync(join(userData, 'User'), { recursive: true });
  writeFileSync(join(userData, 'User', 'settings.json'), JSON.stringify(settings, null, 2));

  log('installing codecue.vsix');
  const dirs = ['--user-data-dir', userData, '--extensions-dir', extensions];
  execFileSync('node', [ENTRY, ...dirs, '--install-extension', join(EXTENSION_DIR, 'codecue.vsix')], { stdio: 'inherit' });

  log(`starting code-server on 127.0.0.1:${port}`);
  const server = spawn('node', [ENTRY, ...dirs, '--auth', 'none', '--bind-addr', `127.0.0.1:${port}`,
    '--disable-telemetry', '--disable-update-check', '--disable-workspace-trust', project],
    { detached: true, stdio: ['ignore', 'ignore', 'inherit'] }); // own process group: killed as a whole by stop()
  let browser: Browser | undefined;
  const stop = async () => {
    await browser?.close();
    if (server.pid) {
      try {
        process.kill(-server.pid, 'SIGTERM');
      } catch {
        // already gone
      }
    }
  };
  try {
    await waitForHttp(`http://127.0.0.1:${port}/healthz`, 60_000);
    browser = await chromium.launch({
      executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync'],
    });
    const page = await browser.newPage({ viewport: options.viewport ?? { width: 1100, height: 560 } });
    await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(project)}`);
    return { server, browser, page, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
