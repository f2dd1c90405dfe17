import { strict as assert } from 'node:assert';
import { test } from 'node:test';

import { CursorRest, EditorState, METHOD, MoveCursorParams, REST_MS, Switches, Timers } from '../cursor-rest';

/** Timers that run only when the test moves the clock. */
class Clock implements Timers {
  now = 0;
  private due: { at: number; fn: () => void; id: number }[] = [];
  private ids = 0;
  set(fn: () => void, ms: number): unknown {
    const id = ++this.ids;
    this.due.push({ at: this.now + ms, fn, id });
    return id;
  }
  clear(handle: unknown): void {
    this.due = this.due.filter((t) => t.id !== handle);
  }
  advance(ms: number): void {
    const until = this.now + ms;
    for (;;) {
      const next = this.due.filter((t) => t.at <= until).sort((a, b) => a.at - b.at)[0];
      if (!next) break;
      this.due = this.due.filter((t) => t !== next);
      this.now = next.at;
      next.fn();
    }
    this.now = until;
  }
  get pending(): number {
    return this.due.length;
  }
}

function editor(fields: Partial<EditorState> = {}): EditorState {
  return { uri: 'file:///a.py', version: 1, line: 0, character: 0, cursors: 1, empty: true, served: true, ...fields };
}

/** A CursorRest whose active editor and switches the test sets, with what it sent. */
function setup() {
  const clock = new Clock();
  const sent: MoveCursorParams[] = [];
  const world = {
    active: editor() as EditorState | undefined,
    switches: { enable: true, prepareAtCursor: true, running: true } as Switches,
  };
  const rest = new CursorRest({
    active: () => world.active, switches: () => world.switches, send: (p) => sent.push(p), timers: clock,
  });
  /** The active editor's selection changed to `e` (as VS Code reports it, after any edit it came with). */
  const move = (e: EditorState) => {
    world.active = e;
    rest.selectionChanged(e);
  };
  return { clock, sent, world, rest, move };
}

test('the notification is the one the server handles, after 400 ms of rest', () => {
  assert.equal(METHOD, 'codecue/didMoveCursor');
  assert.equal(REST_MS, 400);
});

test('a click sends once, 400 ms after it, with the document, its version and the position', () => {
  const { clock, sent, rest, move } = setup();
  rest.focused(editor()); // the editor was there before
  clock.advance(1000);
  sent.length = 0;
  move(editor({ line: 12, character: 4 }));
  clock.advance(REST_MS - 1);
  assert.equal(sent.length, 0, 'not before the rest');
  clock.advance(1);
  assert.deepEqual(sent, [{ textDocument: { uri: 'file:///a.py', version: 1 }, position: { line: 12, character: 4 } }]);
  clock.advance(5000);
  assert.equal(sent.length, 1, 'one notification per rest');
});

test('moves closer than 400 ms apart send once, for the last position', () => {
  const { clock, sent, rest, move } = setup();
  rest.focused(editor());
  for (let line = 1; line <= 10; line++) {
    clock.advance(100); // arrow key repeat
    move(editor({ line }));
  }
  assert.equal(sent.length, 0);
  clock.advance(REST_MS);
  assert.deepEqual(sent.map((p) => p.position), [{ line: 10, character: 0 }]);
});

test('typing (a selection change with a new version) sends nothing and cancels the pending move', () => {
  const { clock, sent, rest, move } = setup();
  rest.focused(editor({ line: 3 }));
  clock.advance(100); // the move to line 3 is pending...
  move(editor({ line: 3, character: 1, version: 2 })); // ...and a key is typed there
  move(editor({ line: 3, character: 2, version: 3 }));
  clock.advance(5000);
  assert.equal(sent.length, 0);
  assert.equal(clock.pending, 0);
  move(editor({ line: 7, character: 0, version: 3 })); // then a click elsewhere: a move again
  clock.advance(REST_MS);
  assert.deepEqual(sent.map((p) => [p.textDocument.version, p.position.line]), [[3, 7]]);
});

test('an edit between the move and the end of the rest cancels it (Delete, a formatter: no selection change)', () => {
  const { clock, sent, world, rest, move } = setup();
  rest.focused(editor());
  clock.advance(REST_MS);
  sent.length = 0;
  move(editor({ line: 5 }));
  clock.advance(200);
  world.active = editor({ line: 5, version: 2 });
  clock.advance(REST_MS);
  assert.equal(sent.length, 0);
});

test('the position sent is the one when the rest ends', () => {
  const { clock, sent, world, move } = setup();
  move(editor({ line: 5, character: 2 }));
  world.active = editor({ line: 5, character: 9 }); // a change the rules did not hear of, version unchanged
  clock.advance(REST_MS);
  assert.deepEqual(sent.map((p) => p.position), [{ line: 5, character: 9 }]);
});

test('a selection, several cursors, an unserved document, or everything not on: nothing is sent', () => {
  const cases: [string, Partial<EditorState>, Partial<Switches>][] = [
    ['a selection', { empty: false }, {}],
    ['multiple cursors', { cursors: 2 }, {}],
    ['a language not enabled', { served: false, uri: 'file:///notes.rb' }, {}],
    ['codecue.enable off', {}, { enable: false }],
    ['codecue.prepareAtCursor off', {}, { prepareAtCursor: false }],
    ['no server running', {}, { running: false }],
  ];
  for (const [what, fields, switches] of cases) {
    const { clock, sent, world, rest, move } = setup();
    world.switches = { ...world.switches, ...switches };
    rest.focused(editor(fields));
    move(editor({ ...fields, line: 4 }));
    clock.advance(5000);
    assert.equal(sent.length, 0, what);
    assert.equal(clock.pending, 0, `${what}: no timer left`);
  }
});

test('an ineligible move cancels the pending one (a selection started, cursors added)', () => {
  const { clock, sent, rest, move } = setup();
  rest.focused(editor());
  clock.advance(100);
  move(editor({ line: 2, empty: false }));
  clock.advance(5000);
  assert.equal(sent.length, 0);
});

test('switched off while resting: nothing is sent', () => {
  const { clock, sent, world, move } = setup();
  move(editor({ line: 2 }));
  world.switches = { ...world.switches, prepareAtCursor: false };
  clock.advance(REST_MS);
  assert.equal(sent.length, 0);
});

test('the first event of a document just focused or opened sends, whatever its version', () => {
  const { clock, sent, world, rest, move } = setup();
  move(editor({ uri: 'file:///a.py', version: 1 }));
  clock.advance(REST_MS);
  // b.py is new: its first selection event counts as a move, not typing.
  move(editor({ uri: 'file:///b.py', version: 7, line: 20 }));
  clock.advance(REST_MS);
  // Back to a.py, edited elsewhere meanwhile (version 4): switching editors is never typing.
  world.active = editor({ uri: 'file:///a.py', version: 4, line: 1 });
  rest.focused(world.active);
  clock.advance(REST_MS);
  assert.deepEqual(sent.map((p) => [p.textDocument.uri, p.textDocument.version, p.position.line]),
    [['file:///a.py', 1, 0], ['file:///b.py', 7, 20], ['file:///a.py', 4, 1]]);
});

test('switching away before the rest ends sends nothing for the old editor', () => {
  const { clock, sent, world, rest, move } = setup();
  move(editor({ line: 3 }));
  clock.advance(100);
  world.active = undefined; // focus in a panel, or the last editor closed
  rest.focused(undefined);
  clock.advance(5000);
  assert.equal(sent.length, 0);
  move(editor({ line: 3 }));
  world.active = editor({ uri: 'file:///other.py' }); // another editor, whose own event has not come yet
  clock.advance(REST_MS);
  assert.equal(sent.length, 0, 'the active editor is another document when the rest ends');
});

test('a document closed and opened again starts afresh; dispose leaves no timer', () => {
  const { clock, sent, rest, move } = setup();
  move(editor({ version: 3 }));
  rest.closed('file:///a.py');
  clock.advance(REST_MS);
  assert.equal(sent.length, 0, 'closed: the pending move goes');
  move(editor({ version: 1, line: 2 })); // reopened: its version starts again at 1, and that is no typing
  clock.advance(REST_MS);
  assert.equal(sent.length, 1);
  move(editor({ line: 9 }));
  rest.dispose();
  assert.equal(clock.pending, 0);
  clock.advance(REST_MS);
  assert.equal(sent.length, 1);
});
