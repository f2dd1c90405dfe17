import { strict as assert } from 'node:assert';
import { test } from 'node:test';

import { ACCEPT, Place, REJECT, SHOW, textAtCursor, Tracker } from '../telemetry';

const CURSOR = '█';

/** 'x = fo█' -> the place of a request with the cursor at █ on line 0. */
function at(line: string, lineNumber = 0): Place {
  return { uri: 'file:///a.py', line: lineNumber, before: line.slice(0, line.indexOf(CURSOR)) };
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

function recorder() {
  const sent: [string, Record<string, unknown>][] = [];
  return { sent, tracker: new Tracker((m, p) => sent.push([m, p])) };
}

test('shown, then accepted with its full length', () => {
  const { sent, tracker } = recorder();
  tracker.provided(at('x = █'), 'foo(é)');
  tracker.accepted('file:///a.py', 'foo(é)');
  assert.deepEqual(sent.map(([m]) => m), [SHOW, ACCEPT]);
  assert.equal(sent[1][1].acceptedLength, 6);
  assert.equal(tracker.shownAt('file:///a.py'), undefined);
});

test('typing the suggestion keeps it; typing something else rejects it once', () => {
  const { sent, tracker } = recorder();
  tracker.provided(at('x = █'), 'foo()');
  tracker.requested(at('x = fo█'));
  assert.equal(sent.length, 1);
  tracker.requested(at('x = fox█'));
  tracker.requested(at('x = foxy█'));
  assert.deepEqual(sent.map(([m]) => m), [SHOW, REJECT]);
  assert.equal(sent[1][1].text, 'foo()');
});

test('moving to another line rejects', () => {
  const { sent, tracker } = recorder();
  tracker.provided(at('x = █'), 'foo()');
  tracker.requested(at('█', 1));
  assert.deepEqual(sent.map(([m]) => m), [SHOW, REJECT]);
});

test('accept a word, then Tab on the original item: each character is counted once, shown once', () => {
  const { sent, tracker } = recorder();
  tracker.provided(at('x = █'), 'foo.bar()');
  tracker.partlyAccepted(at('x = █'), 'foo');
  tracker.requested(at('x = foo█')); // VS Code asks again after the insert
  tracker.provided(at('x = foo█'), '.bar()'); // ...and gets the rest of the same suggestion
  tracker.accepted('file:///a.py', 'foo.bar()'); // Tab runs the command of the item first shown
  assert.deepEqual(sent.map(([m]) => m), [SHOW, ACCEPT, ACCEPT]);
  assert.deepEqual(sent[1][1], { uri: 'file:///a.py', text: 'foo.bar()', length: 9, acceptedLength: 3 });
  assert.deepEqual(sent[2][1], { uri: 'file:///a.py', text: 'foo.bar()', length: 9, acceptedLength: 6 });
});

test('accept a line, then Tab on the item for the rest', () => {
  const { sent, tracker } = recorder();
  tracker.provided(at('if x:█'), '\n    y = 1\n    z = 2');
  tracker.partlyAccepted(at('if x:█'), '\n    y = 1');
  tracker.provided(at('    y = 1█', 1), '\n    z = 2');
  tracker.accepted('file:///a.py', '\n    z = 2');
  assert.deepEqual(sent.map(([m, p]) => [m, p.acceptedLength]), [[SHOW, undefined], [ACCEPT, 10], [ACCEPT, 10]]);
});

test('a partly accepted suggestion that is then abandoned is not a rejection', () => {
  const { sent, tracker } = recorder();
  tracker.provided(at('x = █'), 'foo.bar()');
  tracker.partlyAccepted(at('x = █'), 'foo');
  tracker.requested(at('x = foo;█'));
  assert.deepEqual(sent.map(([m]) => m), [SHOW, ACCEPT]);
});

test('the same text at the same place asked for again is one suggestion, shown once', () => {
  const { sent, tracker } = recorder();
  tracker.provided(at('x = █'), 'foo()');
  tracker.requested(at('x = █')); // Escape, then an explicit trigger at the same place
  tracker.provided(at('x = █'), 'foo()');
  assert.deepEqual(sent.map(([m]) => m), [SHOW]);
  tracker.accepted('file:///a.py', 'foo()');
  assert.deepEqual(sent.map(([m]) => m), [SHOW, ACCEPT]);
  assert.equal(sent[1][1].acceptedLength, 5);
});
