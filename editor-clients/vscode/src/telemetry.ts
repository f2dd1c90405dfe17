// Which suggestion is on screen per document, and the codecue/* notifications about it.
// VS Code's stable API has no "shown" or "rejected" callbacks: a suggestion counts as shown when it is handed to
// the editor, and as rejected when the next request finds the user typed something else or moved away. Each shown
// suggestion has an id; every notification about it carries that id, so the server counts one suggestion however
// many parts of it are accepted. No vscode import: unit-tested as is.
import { randomUUID } from 'node:crypto';

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

/** A document line's text without its line break, for a suggestion typed across lines. */
export type LineAt = (line: number) => string;

interface Candidate {
  id: string;
  place: Place; // where `text` starts: the cursor of the request, or where the last part accepted ended
  text: string; // what it still inserts there
}

interface OnScreen extends Candidate {
  length: number; // characters of the suggestion as first shown
  alternatives: Candidate[]; // the other items of the latest answer (VS Code's next/previous suggestion)
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

/** What was typed between `from` and `to` (same document), or undefined when `to` is not after `from` or the text
 * between them cannot be known: lines in between come from lineAt. */
export function typedBetween(from: Place, to: Place, lineAt?: LineAt): string | undefined {
  if (to.line === from.line) {
    return to.before.startsWith(from.before) ? to.before.slice(from.before.length) : undefined;
  }
  if (to.line < from.line || !lineAt) {
    return undefined;
  }
  const first = lineAt(from.line);
  if (!first.startsWith(from.before)) {
    return undefined;
  }
  const lines = [first.slice(from.before.length)];
  for (let line = from.line + 1; line < to.line; line++) {
    lines.push(lineAt(line));
  }
  lines.push(to.before);
  return lines.join('\n');
}

/** The LSP position of a place: VS Code and LSP both count UTF-16 code units. */
function position(place: Place): { line: number; character: number } {
  return { line: place.line, character: place.before.length };
}

/** The place after `inserted` was typed or accepted at `place`. */
function after(place: Place, inserted: string): Place {
  const lines = inserted.split('\n');
  const last = lines[lines.length - 1];
  return { uri: place.uri, line: place.line + lines.length - 1, before: (lines.length === 1 ? place.before : '') + last };
}

export class Tracker {
  private onScreen = new Map<string, OnScreen>();

  constructor(private readonly send: Send, private readonly newId: () => string = randomUUID) {}

  /** A new request at `place`. The suggestion shown before is accepted when the user typed all of it, rejected
   * when they typed something else or moved away, and kept while they type it. */
  requested(place: Place, lineAt?: LineAt): void {
    const shown = this.onScreen.get(place.uri);
    if (!shown) {
      return;
    }
    const typed = typedBetween(shown.place, place, lineAt);
    if (typed === shown.text) {
      this.onScreen.delete(place.uri);
      this.sendAccept(shown, shown.text);
    } else if (typed === undefined || !shown.text.startsWith(typed)) {
      this.onScreen.delete(place.uri);
      this.reject(shown);
    }
  }

  /** The usable items of an answer at `place`, in order, were handed to the editor; returns each one's id, which
   * its accept command carries. The first one is on screen. When it continues the suggestion already on screen
   * (asked again at the same place: an explicit trigger, VS Code's next/previous suggestion, Escape then trigger;
   * or the user is typing it, or took a part of it), it is that suggestion, not a new one to count. */
  provided(place: Place, texts: string[], lineAt?: LineAt): string[] {
    if (texts.length === 0) {
      return [];
    }
    let shown = this.onScreen.get(place.uri);
    const typed = shown && typedBetween(shown.place, place, lineAt);
    if (shown && (typed === undefined || shown.text.slice(typed.length) !== texts[0] || !shown.text.startsWith(typed))) {
      this.reject(shown); // replaced by a new suggestion
      shown = undefined;
    }
    if (!shown) {
      shown = { id: this.newId(), place, text: texts[0], length: length(texts[0]), alternatives: [] };
      this.onScreen.set(place.uri, shown);
      this.send(SHOW, { uri: place.uri, length: shown.length, id: shown.id });
    }
    const before = shown.alternatives;
    shown.alternatives = texts.slice(1).map((text) => {
      const same = before.find((a) => a.text === text && a.place.line === place.line && a.place.before === place.before);
      return same ?? { id: this.newId(), place, text };
    });
    return [shown.id, ...shown.alternatives.map((a) => a.id)];
  }

  /** Tab accepted the item with this id (VS Code runs the item's command after it inserted it): all that is left
   * of the suggestion. An alternative (cycled to with VS Code's next/previous suggestion) is then the suggestion
   * shown, and the first one rejected. */
  accepted(uri: string, id: string): void {
    const shown = this.switchTo(uri, id);
    if (shown) {
      this.onScreen.delete(uri);
      this.sendAccept(shown, shown.text);
    }
  }

  /** Part of the suggestion (a word or a line) was inserted at `place`; the rest stays on screen after it. Text the
   * user typed of it before counts as accepted with it. */
  partlyAccepted(place: Place, inserted: string, lineAt?: LineAt): void {
    const shown = this.onScreen.get(place.uri);
    if (!shown || inserted === '') {
      return;
    }
    const typed = typedBetween(shown.place, place, lineAt);
    if (typed === undefined) {
      return;
    }
    // VS Code shows an alternative only where the user asked to cycle, at the cursor: the part tells which one.
    const candidates = [shown, ...shown.alternatives.filter((a) => typed === '' && samePlace(a.place, place))];
    const taken = candidates.find((c) => c.text.startsWith(typed + inserted));
    const current = taken && this.switchTo(place.uri, taken.id);
    if (!current) {
      return;
    }
    const accepted = typed + inserted;
    this.sendAccept(current, accepted);
    const rest = current.text.slice(accepted.length);
    if (rest === '') {
      this.onScreen.delete(place.uri);
    } else {
      this.onScreen.set(place.uri, { ...current, place: after(current.place, accepted), text: rest, alternatives: [] });
    }
  }

  /** The text the suggestion on screen in this document still inserts, for tests. */
  shownAt(uri: string): string | undefined {
    return this.onScreen.get(uri)?.text;
  }

  /** The suggestion with this id, made the one on screen: an alternative is shown (and the first one rejected). */
  private switchTo(uri: string, id: string): OnScreen | undefined {
    const shown = this.onScreen.get(uri);
    if (!shown || shown.id === id) {
      return shown;
    }
    const alternative = shown.alternatives.find((a) => a.id === id);
    if (!alternative) {
      return undefined;
    }
    this.reject(shown);
    const now: OnScreen = { ...alternative, length: length(alternative.text), alternatives: [] };
    this.onScreen.set(uri, now);
    this.send(SHOW, { uri, length: now.length, id: now.id });
    return now;
  }

  private sendAccept(shown: OnScreen, text: string): void {
    this.send(ACCEPT, {
      uri: shown.place.uri, length: shown.length, acceptedLength: length(text), id: shown.id, text,
      position: position(shown.place),
    });
  }

  /** Rejected unless a part of it was accepted: that suggestion counted as accepted already. */
  private reject(shown: OnScreen): void {
    this.onScreen.delete(shown.place.uri);
    if (!this.partlyTaken(shown)) {
      this.send(REJECT, { uri: shown.place.uri, length: shown.length, id: shown.id });
    }
  }

  private partlyTaken(shown: OnScreen): boolean {
    return length(shown.text) < shown.length;
  }
}

function samePlace(a: Place, b: Place): boolean {
  return a.line === b.line && a.before === b.before;
}
