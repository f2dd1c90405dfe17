// When the cursor comes to rest after a move that was not typing (a click, arrow keys, a jump, another editor,
// a file just opened), tell the server (codecue/didMoveCursor) so it prefills the prompt there while the user
// reads: VS Code asks for inline completions only while typing, so otherwise the first keystroke after a move
// finds nothing computed (~10 s on a slow CPU). No vscode import: unit-tested as is.

export const METHOD = 'codecue/didMoveCursor';
export const REST_MS = 400; // long enough that scrolling with the arrow keys sends once, at the end

/** The server's params: TextDocumentPositionParams plus the version the position belongs to. */
export interface MoveCursorParams {
  textDocument: { uri: string; version: number };
  position: { line: number; character: number };
}

/** An editor as the rules see it. */
export interface EditorState {
  uri: string; // as the language client sent it in didOpen
  version: number;
  line: number; // the primary selection's active end, in UTF-16 code units as VS Code and the client count
  character: number;
  cursors: number; // selections in the editor
  empty: boolean; // the primary selection is empty
  served: boolean; // a document the client sends to the server (its document selector)
}

/** What must be on for anything to be sent. */
export interface Switches {
  enable: boolean; // codecue.enable
  prepareAtCursor: boolean; // codecue.prepareAtCursor
  running: boolean; // the language client is running
}

export interface Timers {
  set(fn: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

export interface Options {
  /** The active editor now, or undefined when there is none (focus in a panel, no editor open). */
  active: () => EditorState | undefined;
  switches: () => Switches;
  send: (params: MoveCursorParams) => void;
  timers?: Timers;
  restMs?: number;
}

const realTimers: Timers = {
  set: (fn, ms) => setTimeout(fn, ms),
  clear: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/** Whether the cursor of `editor` is one to prepare for: one plain cursor in a served document, everything on. */
export function restable(editor: EditorState | undefined, on: Switches): editor is EditorState {
  return editor !== undefined && on.enable && on.prepareAtCursor && on.running
    && editor.served && editor.cursors === 1 && editor.empty;
}

export class CursorRest {
  // Per document, its version at the previous event: a selection change that comes with a new version is typing
  // (or another edit: paste, undo, an accepted suggestion), whose request prepares the prompt itself.
  private seen = new Map<string, number>();
  private pending: { uri: string; version: number; handle: unknown } | undefined;
  private readonly timers: Timers;
  private readonly restMs: number;

  constructor(private readonly options: Options) {
    this.timers = options.timers ?? realTimers;
    this.restMs = options.restMs ?? REST_MS;
  }

  /** The selection changed in an editor (onDidChangeTextEditorSelection). */
  selectionChanged(editor: EditorState): void {
    const before = this.seen.get(editor.uri);
    this.seen.set(editor.uri, editor.version);
    if (before !== undefined && before !== editor.version) {
      this.cancel();
      return;
    }
    this.schedule(editor);
  }

  /** Another editor became active (a switch, a file opened) or the server just started: a move, whatever the
   * version, since nothing was typed here; a document seen the first time is always one. */
  focused(editor: EditorState | undefined): void {
    if (editor === undefined) {
      this.cancel();
      return;
    }
    this.seen.set(editor.uri, editor.version);
    this.schedule(editor);
  }

  /** The document was closed: opened again, its first event is a move. */
  closed(uri: string): void {
    this.seen.delete(uri);
    if (this.pending?.uri === uri) {
      this.cancel();
    }
  }

  cancel(): void {
    if (this.pending) {
      this.timers.clear(this.pending.handle);
      this.pending = undefined;
    }
  }

  dispose(): void {
    this.cancel();
    this.seen.clear();
  }

  /** Every move restarts the wait, so a rest sends once, for where the cursor ended. */
  private schedule(editor: EditorState): void {
    this.cancel();
    if (!restable(editor, this.options.switches())) {
      return;
    }
    const pending = { uri: editor.uri, version: editor.version, handle: undefined as unknown };
    pending.handle = this.timers.set(() => this.fire(pending), this.restMs);
    this.pending = pending;
  }

  /** Checked again: an edit without a selection change (Delete, a formatter) or a switch away since the move
   * leaves nothing to prepare. The position is the one now. */
  private fire(pending: { uri: string; version: number }): void {
    if (this.pending !== pending) {
      return;
    }
    this.pending = undefined;
    const now = this.options.active();
    if (!restable(now, this.options.switches()) || now.uri !== pending.uri || now.version !== pending.version) {
      return;
    }
    this.options.send({
      textDocument: { uri: now.uri, version: now.version },
      position: { line: now.line, character: now.character },
    });
  }
}
