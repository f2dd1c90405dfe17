// Which suggestion is on screen per document, and the codecue/* notifications about it.
// VS Code's stable API has no "shown" or "rejected" callbacks: a suggestion counts as shown when it is handed to
// the editor, and as rejected when the next request finds the user typed something else or moved away.
// No vscode import: unit-tested as is.

export type Send = (method: string, params: Record<string, unknown>) => void;

export const SHOW = 'codecue/didShowCompletion';
export const ACCEPT = 'codecue/didAcceptCompletion';
export const REJECT = 'codecue/didRejectCompletion';

/** Where a request was made: document, line, and the line's text before the cursor. */
export interface Place {
  uri: string;
  line: number;
  before: string;
}

interface OnScreen extends Place {
  text: string; // what the suggestion still inserts at the cursor
  original: string; // the suggestion as first shown
  acceptedChars: number; // characters of it accepted so far by accept-word / accept-line
}

export function length(text: string): number {
  return [...text].length; // characters, as the Neovim plugin counts them
}

/** The text an item inserts at the cursor: its insertText minus the part before the cursor that its range covers
 * (already typed), or undefined when the item does not continue what is typed. */
export function textAtCursor(insertText: string, rangeStart: number | undefined, place: Place): string | undefined {
  const typed = rangeStart === undefined ? '' : place.before.slice(rangeStart);
  if (!insertText.startsWith(typed)) {
    return undefined;
  }
  const text = insertText.slice(typed.length);
  return text === '' ? undefined : text;
}

export class Tracker {
  private onScreen = new Map<string, OnScreen>();

  constructor(private readonly send: Send) {}

  /** A new request at `place`: the suggestion shown before is rejected unless the user is typing it. */
  requested(place: Place): void {
    const shown = this.onScreen.get(place.uri);
    if (!shown || isTypingIt(shown, place)) {
      return;
    }
    this.onScreen.delete(place.uri);
    if (shown.acceptedChars === 0) {
      this.send(REJECT, { uri: shown.uri, text: shown.original, length: length(shown.original) });
    }
  }

  /** The first usable item was handed to the editor. The same text at the same place is the same suggestion, not
   * a new one to count: VS Code asks again at the same position (an explicit trigger, Escape then
   * trigger) and after a partial accept (which then gets the rest of the suggestion). */
  provided(place: Place, text: string): void {
    const shown = this.onScreen.get(place.uri);
    if (shown && samePlace(shown, place) && shown.text === text) {
      return;
    }
    this.onScreen.set(place.uri, { ...place, text, original: text, acceptedChars: 0 });
    this.send(SHOW, { uri: place.uri, text, length: length(text) });
  }

  /** Tab accepted what is left (the item's command runs after VS Code inserted it). `text` is what that item
   * inserts, which after a partial accept may still be the whole original suggestion. */
  accepted(uri: string, text: string): void {
    const shown = this.onScreen.get(uri);
    this.onScreen.delete(uri);
    const before = shown && shown.original === text ? shown.acceptedChars : 0;
    const original = shown && shown.acceptedChars > 0 ? shown.original : text;
    this.send(ACCEPT, { uri, text: original, length: length(original), acceptedLength: length(text) - before });
  }

  /** Part of the suggestion (a word or a line) was inserted at `place`; the rest stays on screen after it. */
  partlyAccepted(place: Place, inserted: string): void {
    const shown = this.onScreen.get(place.uri);
    if (!shown || inserted === '' || !shown.text.startsWith(inserted)) {
      return;
    }
    const lines = inserted.split('\n');
    const after: Place = {
      uri: place.uri,
      line: place.line + lines.length - 1,
      before: (lines.length === 1 ? place.before : '') + lines[lines.length - 1],
    };
    const acceptedChars = shown.acceptedChars + length(inserted);
    this.onScreen.set(place.uri, { ...after, text: shown.text.slice(inserted.length), original: shown.original, acceptedChars });
    this.send(ACCEPT, {
      uri: place.uri, text: shown.original, length: length(shown.original), acceptedLength: length(inserted),
    });
  }

  shownAt(uri: string): string | undefined {
    return this.onScreen.get(uri)?.text;
  }
}

function samePlace(a: Place, b: Place): boolean {
  return a.line === b.line && a.before === b.before;
}

function isTypingIt(shown: OnScreen, place: Place): boolean {
  if (place.line !== shown.line || !place.before.startsWith(shown.before)) {
    return false;
  }
  const typed = place.before.slice(shown.before.length);
  return typed.length < shown.text.length && shown.text.startsWith(typed);
}
