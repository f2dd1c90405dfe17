// The extension's settings ("codecue.*") and what the server gets from them. No vscode import: unit-tested as is.

export interface Settings {
  enable: boolean;
  serverPath: string;
  serverArgs: string[];
  serverEnv: Record<string, string>;
  pair: string;
  enabledLanguages: string[];
  debounceMs: number;
  maxTokens: number;
  drafter: string;
  middleFrom: string;
  nextLine: boolean;
  prepareAtCursor: boolean; // also the client's switch: off, it sends no codecue/didMoveCursor
  promptTokens: number; // 0: auto (the server sizes prompts by what the machine prefills)
  coldPromptTokens: number; // 0: auto; a prompt nothing is cached for starts this small, the full one follows
  engine: string;
  remoteModel: string;
  context: boolean; // project context: other files of the workspace in the prompt
  contextTokens: number; // 0: auto (a third of the prompt)
  excludeGlobs: string[]; // gitignore-style, relative to a workspace folder: never indexed nor sent
  maxIndexedFiles: number;
  indexCache: boolean;
  minConfidence: number | null; // 0..1; 0: every suggestion is shown; null: the pair's threshold (auto)
}

/** The part of vscode.WorkspaceConfiguration that is read here. */
export interface ConfigReader {
  get<T>(key: string, fallback: T): T;
  inspect<T>(key: string): { globalValue?: T } | undefined;
}

/** Settings that choose the program started, its arguments and environment, and where code and the API key go.
 * package.json gives them machine scope; they are read from the user's own settings only, so a repository's
 * .vscode/settings.json cannot set them even where an editor would merge it in. */
export const USER_ONLY = ['server.path', 'server.args', 'server.env', 'engine'];

/** The user's own value of a USER_ONLY setting, else the default: a workspace or folder value is never read. */
function userValue<T>(config: ConfigReader, key: string, fallback: T): T {
  const value = config.inspect<T>(key)?.globalValue;
  return value === undefined ? fallback : value;
}

export const DEFAULT_LANGUAGES = [
  'python', 'javascript', 'javascriptreact', 'typescript', 'typescriptreact', 'go', 'rust', 'java', 'c', 'cpp',
];

export function readSettings(config: ConfigReader): Settings {
  return {
    enable: config.get('enable', true),
    serverPath: userValue(config, 'server.path', 'codecue-lsp').trim() || 'codecue-lsp',
    serverArgs: userValue<string[]>(config, 'server.args', []).filter((a) => a !== '--stdio'),
    serverEnv: userValue<Record<string, string>>(config, 'server.env', {}),
    pair: config.get('pair', 'default'),
    enabledLanguages: config.get('enabledLanguages', DEFAULT_LANGUAGES),
    debounceMs: config.get('debounceMs', 30),
    maxTokens: config.get('maxTokens', 64),
    drafter: config.get('drafter', 'auto'),
    middleFrom: config.get('middleFrom', 'line'),
    nextLine: config.get('nextLine', true),
    prepareAtCursor: config.get('prepareAtCursor', true),
    promptTokens: config.get('promptTokens', 0),
    coldPromptTokens: config.get('coldPromptTokens', 0),
    engine: userValue(config, 'engine', 'local').trim() || 'local',
    remoteModel: config.get('remoteModel', '').trim(),
    context: config.get('context', true),
    contextTokens: config.get('contextTokens', 0),
    excludeGlobs: mergeGlobs([config.get<unknown>('excludeGlobs', [])]),
    maxIndexedFiles: config.get('maxIndexedFiles', 5000),
    indexCache: config.get('indexCache', true),
    minConfidence: config.get<number | null>('minConfidence', null),
  };
}

/** excludeGlobs of the window and of each workspace folder (the setting is resource-scoped) as one list: the
 * server keeps one set of exclusions, and a folder's pattern applied to another can only leave more code out. */
export function mergeGlobs(lists: unknown[]): string[] {
  const globs: string[] = [];
  for (const list of lists) {
    for (const glob of Array.isArray(list) ? list : []) {
      const trimmed = typeof glob === 'string' ? glob.trim() : '';
      if (trimmed && !globs.includes(trimmed)) globs.push(trimmed);
    }
  }
  return globs;
}

/** A whole number within the server's range (codecue_lsp/config.py ignores one outside it), or the fallback. */
function intIn(value: number, lo: number, hi: number, fallback: number): number {
  return Number.isFinite(value) ? Math.min(hi, Math.max(lo, Math.round(value))) : fallback;
}

/** The settings the server understands (codecue_lsp/config.py), for initializationOptions and
 * workspace/configuration. Client-only settings (enable, server.*) are left out so the server has nothing to
 * warn about. */
export function serverSettings(s: Settings): Record<string, unknown> {
  const contextTokens = intIn(s.contextTokens, 0, 16384, 0);
  const sent: Record<string, unknown> = {
    pair: s.pair, enabledLanguages: s.enabledLanguages, debounceMs: s.debounceMs, maxTokens: s.maxTokens,
    drafter: s.drafter, middleFrom: s.middleFrom, nextLine: s.nextLine, prepareAtCursor: s.prepareAtCursor,
    engine: s.engine,
    promptTokens: s.promptTokens > 0 ? Math.max(256, Math.round(s.promptTokens)) : 'auto',
    coldPromptTokens: s.coldPromptTokens > 0 ? Math.max(128, Math.round(s.coldPromptTokens)) : 'auto',
    context: s.context,
    contextTokens: contextTokens > 0 ? contextTokens : 'auto',
    excludeGlobs: s.excludeGlobs,
    maxIndexedFiles: intIn(s.maxIndexedFiles, 0, 200000, 5000),
    indexCache: s.indexCache,
    minConfidence: typeof s.minConfidence === 'number' && Number.isFinite(s.minConfidence)
      ? Math.min(1, Math.max(0, s.minConfidence)) : 'auto',
  };
  if (s.remoteModel) sent.remoteModel = s.remoteModel; // empty: the server asks the engine's /v1/models
  return sent;
}

/** Whether CodeCue completes this language: listed, or "*" listed (every language). */
export function languageEnabled(languages: string[], languageId: string): boolean {
  return languages.includes(languageId) || languages.includes('*');
}

/** Which documents the client sends to the server: files and unsaved buffers of the enabled languages. */
export function documentSelector(s: Settings): { scheme: string; language: string }[] {
  return s.enabledLanguages.flatMap((language) => [
    { scheme: 'file', language },
    { scheme: 'untitled', language },
  ]);
}

/** Settings whose change needs a server restart: everything the process is started with, and what the server
 * loads once (codecue_lsp/config.py LOAD_SETTINGS). The project context settings are read per request and by the
 * index, so they need none; nor does enabledLanguages (see languagesOutside). */
export function needsRestart(before: Settings, after: Settings): boolean {
  const started = (s: Settings) =>
    JSON.stringify([s.serverPath, s.serverArgs, s.serverEnv, s.pair, s.engine, s.remoteModel]);
  return started(before) !== started(after);
}

/** Enabled languages whose documents a client started with `served` does not send: the client's document
 * selector is fixed when it starts, so only these need a restart. A language switched off needs none: the
 * extension stops asking for it, and the server checks the language of each request. */
export function languagesOutside(served: string[], enabled: string[]): string[] {
  return served.includes('*') ? [] : enabled.filter((language) => !served.includes(language));
}
