import { strict as assert } from 'node:assert';
import { test } from 'node:test';

import { ACCEPT, Place, REJECT, SHOW, textAtCursor, Tracker, typedBetween } from '../telemetry';

const CURSOR = '█';
const URI = 'file:///a.py';

/** 'x = fo█' -> the place of a request with the cursor at █ on line 0. */
function at(line: string, lineNumber = 0): Place {
  return { uri: URI, line: lineNumber, before: line.slice(0, line.indexOf(CURSOR)) };
}

/** A document, with the cursor marked: its place and its lines. */
function doc(text: string): { place: Place; lineAt: (n: number) => string } {
  const lines = text.split('\n');
  const line = lines.findIndex((l) => l.includes(CURSOR));
  return { place: at(lines[line], line), lineAt: (n) => lines[n].replace(CURSOR, '') };
}

const cases: [string, string, number | undefined, string | undefined][] = [
  // line with cursor, item insertText, item range start (undefined: no range), text inserted at the cursor
  ['x = █', 'foo()', undefined, 'foo()'],
  ['x = █', 'foo()', 4, 'foo()'],
  ['x = fo█', 'foo()', 4, 'o()'],
  ['x = fo█', 'bar()', 4, undefined], // does not continue what is typed
  ['x = foo█', 'foo', 4, undefined], // nothing left to insert
  ['x = fo█', 'x = foo()', 0, 'o()'],
];
for (const [line, insert, start, expected] of cases) {
  test(`textAtCursor ${JSON.stringify(line)} + ${JSON.stringify(insert)}`, () => {
    assert.equal(textAtCursor(insert, start, at(line)), expected);
  });
}

const typedCases: [string, string, string | undefined][] = [
  // the document when the suggestion was shown, the document now, what was typed in between
  ['x = █', 'x = fo█', 'fo'],
  ['x = █', 'x = █', ''],
  ['x = f█', 'x = █', undefined], // deleted
  ['x = █', 'y = █', undefined], // changed before the cursor
  ['if x:█', 'if x:\n    y█', '\n    y'],
  ['if x:█', 'if x:\n    y = 1\n    z█', '\n    y = 1\n    z'],
  ['if x:█', 'if x: # c\n    y█', ' # c\n    y'], // typed, whether or not it is the suggestion
  ['if x:█', 'if y:\n    y█', undefined], // the first line changed before the cursor
  ['if x:\n    y█', 'if x:█', undefined], // moved up
];
for (const [shown, now, expected] of typedCases) {
  test(`typedBetween ${JSON.stringify(shown)} -> ${JSON.stringify(now)}`, () => {
    const later = doc(now);
    assert.equal(typedBetween(doc(shown).place, later.place, later.lineAt), expected);
  });
}

function recorder() {
  const sent: [string, Record<string, unknown>][] = [];
  let n = 0;
  return { sent, tracker: new Tracker((m, p) => sent.push([m, p]), () => `s${++n}`) };
}

test('shown, then accepted with its full length, the text and where it starts', () => {
  const { sent, tracker } = recorder();
  const [id] = tracker.provided(at('x = █'), ['foo(é)']);
  tracker.accepted(URI, id);
  assert.deepEqual(sent, [
    [SHOW, { uri: URI, length: 6, id: 's1' }],
    [ACCEPT, { uri: URI, length: 6, acceptedLength: 6, id: 's1', text: 'foo(é)', position: { line: 0, character: 4 } }],
  ]);
  assert.equal(tracker.shownAt(URI), undefined);
});

test('typing the suggestion keeps it, shown once; typing something else rejects it once', () => {
  const { sent, tracker } = recorder();
  tracker.provided(at('x = █'), ['foo()']);
  tracker.requested(at('x = fo█'));
  tracker.provided(at('x = fo█'), ['o()']); // the rest of the same suggestion
  assert.deepEqual(sent.map(([m]) => m), [SHOW]);
  tracker.requested(at('x = fox█'));
  tracker.requested(at('x = foxy█'));
  assert.deepEqual(sent, [[SHOW, { uri: URI, length: 5, id: 's1' }], [REJECT, { uri: URI, length: 5, id: 's1' }]]);
});

test('typing the whole suggestion through is an accept of all of it', () => {
  const { sent, tracker } = recorder();
  tracker.provided(at('x = █'), ['foo()']);
  for (const typed of ['f', 'fo', 'foo', 'foo(']) {
    tracker.requested(at(`x = ${typed}█`));
    tracker.provided(at(`x = ${typed}█`), ['foo()'.slice(typed.length)]);
  }
  tracker.requested(at('x = foo()█'));
  assert.deepEqual(sent, [
    [SHOW, { uri: URI, length: 5, id: 's1' }],
    [ACCEPT, { uri: URI, length: 5, acceptedLength: 5, id: 's1', text: 'foo()', position: { line: 0, character: 4 } }],
  ]);
  tracker.requested(at('x = foo();█'));
  assert.equal(sent.length, 2, 'an accepted suggestion is not rejected later');
});

test('typing a suggestion of several lines through, Enter and indentation included', () => {
  const { sent, tracker } = recorder();
  tracker.provided(at('if x:█'), ['\n    y = 1']);
  const now = doc('if x:\n    y = █');
  tracker.requested(now.place, now.lineAt);
  assert.equal(sent.length, 1);
  const end = doc('if x:\n    y = 1█');
  tracker.requested(end.place, end.lineAt);
  assert.deepEqual(sent.map(([m, p]) => [m, p.acceptedLength, p.text]), [
    [SHOW, undefined, undefined], [ACCEPT, 10, '\n    y = 1'],
  ]);
});

test('moving to another line rejects', () => {
  const { sent, tracker } = recorder();
  tracker.provided(at('x = █'), ['foo()']);
  tracker.requested(at('█', 1));
  assert.deepEqual(sent.map(([m]) => m), [SHOW, REJECT]);
});

test('accept a word, then Tab on the original item: each character counted once, one suggestion', () => {
  const { sent, tracker } = recorder();
  const [id] = tracker.provided(at('x = █'), ['foo.bar()']);
  tracker.partlyAccepted(at('x = █'), 'foo');
  tracker.requested(at('x = foo█')); // VS Code asks again after the insert
  assert.deepEqual(tracker.provided(at('x = foo█'), ['.bar()']), [id], 'the rest of the same suggestion');
  tracker.accepted(URI, id); // Tab runs the command of the item first shown
  assert.deepEqual(sent, [
    [SHOW, { uri: URI, length: 9, id: 's1' }],
    [ACCEPT, { uri: URI, length: 9, acceptedLength: 3, id: 's1', text: 'foo', position: { line: 0, character: 4 } }],
    [ACCEPT, { uri: URI, length: 9, acceptedLength: 6, id: 's1', text: '.bar()', position: { line: 0, character: 7 } }],
  ]);
});

test('typed part of it, then accepted a word: the typed part is accepted with the word', () => {
  const { sent, tracker } = recorder();
  tracker.provided(at('x = █'), ['foo.bar()']);
  tracker.requested(at('x = f█'));
  tracker.partlyAccepted(at('x = f█'), 'oo');
  assert.deepEqual(sent[1][1], {
    uri: URI, length: 9, acceptedLength: 3, id: 's1', text: 'foo', position: { line: 0, character: 4 },
  });
  tracker.requested(at('x = foo.bar()█')); // and typed the rest
  assert.deepEqual(sent.map(([m, p]) => [m, p.acceptedLength]), [[SHOW, undefined], [ACCEPT, 3], [ACCEPT, 6]]);
});

test('accept a line, then Tab on the item for the rest', () => {
  const { sent, tracker } = recorder();
  const [id] = tracker.provided(at('if x:█'), ['\n    y = 1\n    z = 2']);
  tracker.partlyAccepted(at('if x:█'), '\n    y = 1');
  tracker.provided(at('    y = 1█', 1), ['\n    z = 2']);
  tracker.accepted(URI, id);
  assert.deepEqual(sent.map(([m, p]) => [m, p.acceptedLength, p.position]), [
    [SHOW, undefined, undefined], [ACCEPT, 10, { line: 0, character: 5 }], [ACCEPT, 10, { line: 1, character: 9 }],
  ]);
});

test('a partly accepted suggestion that is then abandoned is not a rejection', () => {
  const { sent, tracker } = recorder();
  tracker.provided(at('x = █'), ['foo.bar()']);
  tracker.partlyAccepted(at('x = █'), 'foo');
  tracker.requested(at('x = foo;█'));
  assert.deepEqual(sent.map(([m]) => m), [SHOW, ACCEPT]);
});

test('the same text at the same place asked for again is one suggestion, shown once', () => {
  const { sent, tracker } = recorder();
  tracker.provided(at('x = █'), ['foo()']);
  tracker.requested(at('x = █')); // Escape, then an explicit trigger at the same place
  const [id] = tracker.provided(at('x = █'), ['foo()']);
  assert.deepEqual(sent.map(([m]) => m), [SHOW]);
  tracker.accepted(URI, id);
  assert.deepEqual(sent.map(([m, p]) => [m, p.id, p.acceptedLength]), [[SHOW, 's1', undefined], [ACCEPT, 's1', 5]]);
});

test('a different answer where the user is typing replaces the suggestion: the old one is rejected', () => {
  const { sent, tracker } = recorder();
  tracker.provided(at('x = █'), ['foo()']);
  tracker.requested(at('x = f█'));
  tracker.provided(at('x = f█'), ['ilter()']);
  assert.deepEqual(sent.map(([m, p]) => [m, p.id]), [[SHOW, 's1'], [REJECT, 's1'], [SHOW, 's2']]);
});

test('cycling: the first item stays the suggestion shown; Tab on an alternative shows it and rejects the first', () => {
  const { sent, tracker } = recorder();
  tracker.provided(at('x = █'), ['foo()']); // automatic: one item
  tracker.requested(at('x = █'));
  const ids = tracker.provided(at('x = █'), ['foo()', 'bar()', 'baz()']); // VS Code's next suggestion: explicit
  assert.deepEqual(ids, ['s1', 's2', 's3']);
  assert.deepEqual(sent.map(([m]) => m), [SHOW], 'alternatives count once they are taken');
  tracker.requested(at('x = █'));
  assert.deepEqual(tracker.provided(at('x = █'), ['foo()', 'bar()', 'baz()']), ids, 'asked again: the same ids');
  tracker.accepted(URI, 's2');
  assert.deepEqual(sent, [
    [SHOW, { uri: URI, length: 5, id: 's1' }],
    [REJECT, { uri: URI, length: 5, id: 's1' }],
    [SHOW, { uri: URI, length: 5, id: 's2' }],
    [ACCEPT, { uri: URI, length: 5, acceptedLength: 5, id: 's2', text: 'bar()', position: { line: 0, character: 4 } }],
  ]);
});

test('cycling: a word accepted of an alternative is counted for that alternative', () => {
  const { sent, tracker } = recorder();
  tracker.provided(at('x = █'), ['foo()', 'bar.baz()']);
  tracker.partlyAccepted(at('x = █'), 'bar');
  tracker.requested(at('x = bar█'));
  tracker.provided(at('x = bar█'), ['.baz()']);
  tracker.accepted(URI, 's2');
  assert.deepEqual(sent.map(([m, p]) => [m, p.id, p.acceptedLength]), [
    [SHOW, 's1', undefined], [REJECT, 's1', undefined], [SHOW, 's2', undefined], [ACCEPT, 's2', 3], [ACCEPT, 's2', 6],
  ]);
});

test('shown ≥ accepted suggestions and accepted characters ≤ shown characters, whatever the order', () => {
  const { sent, tracker } = recorder();
  const [a] = tracker.provided(at('x = █'), ['foo.bar()', 'foo.baz()']);
  tracker.partlyAccepted(at('x = █'), 'foo');
  tracker.accepted(URI, a);
  tracker.accepted(URI, a); // a second command run for the same item counts nothing
  tracker.provided(at('y = █', 1), ['1']);
  tracker.requested(at('y = 1█', 1));
  const ids = (method: string) => new Set(sent.filter(([m]) => m === method).map(([, p]) => p.id));
  const shown = ids(SHOW);
  assert.equal(shown.size, 2);
  assert.ok([...ids(ACCEPT)].every((id) => shown.has(id)));
  const chars = (id: unknown) => sent.filter(([m, p]) => m === ACCEPT && p.id === id)
    .reduce((sum, [, p]) => sum + (p.acceptedLength as number), 0);
  for (const [m, p] of sent) {
    if (m === SHOW) assert.ok(chars(p.id) <= (p.length as number), `${p.id}: ${chars(p.id)} > ${p.length}`);
  }
  assert.equal(chars('s1'), 9);
  assert.equal(chars('s3'), 1);
});
