// Where the server executable is: the settings may say "~/...", "${userHome}/..." or "${workspaceFolder}/..."
// (as the README shows), but spawn takes a path as written, so these are expanded here. A missing file gets an
// error that names the path tried instead of the client's bare "spawn ENOENT". No vscode import: unit-tested as is.
import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, isAbsolute, join } from 'node:path';

export interface Places {
  home: string;
  workspaceFolder?: string; // the first workspace folder, when one is open
}

/** `~`, `${userHome}` and `${workspaceFolder}` expanded (VS Code does not do it for extension settings). */
export function expandPath(value: string, places: Places): string {
  let out = value.replace(/\$\{userHome\}/g, places.home);
  if (places.workspaceFolder !== undefined) {
    out = out.replace(/\$\{workspaceFolder\}/g, places.workspaceFolder);
  }
  if (out === '~' || out.startsWith('~/')) {
    out = places.home + out.slice(1);
  }
  return out;
}

export type Resolved = { command: string } | { error: string };

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

/** The executable to spawn for codecue.server.path, or why there is none. A bare name is looked up on `pathEnv`
 * (the PATH the server is started with); anything with a slash is a file path. */
export function resolveServer(setting: string, places: Places, pathEnv: string | undefined): Resolved {
  const expanded = expandPath(setting, places);
  const shown = expanded === setting ? `"${setting}"` : `"${setting}" (${expanded})`;
  if (expanded.includes('${workspaceFolder}')) {
    return { error: `codecue.server.path ${shown} uses \${workspaceFolder} but no folder is open` };
  }
  if (!expanded.includes('/')) {
    for (const dir of (pathEnv ?? '').split(delimiter).filter((d) => d !== '')) {
      if (executable(join(dir, expanded))) {
        return { command: expanded };
      }
    }
    return { error: `codecue.server.path ${shown} is not on PATH. Install it (pip install codecue) or set an absolute path` };
  }
  const path = isAbsolute(expanded) || places.workspaceFolder === undefined ? expanded : join(places.workspaceFolder, expanded);
  if (!executable(path)) {
    const why = (() => {
      try {
        return statSync(path).isFile() ? 'is not executable' : 'is not a file';
      } catch {
        return 'does not exist';
      }
    })();
    return { error: `codecue.server.path ${shown}: ${path} ${why}` };
  }
  return { command: path };
}
