import { strict as assert } from 'node:assert';
import { test } from 'node:test';

import { Status } from '../status';

test('loading progress, then ready with the last latency', () => {
  const s = new Status();
  assert.match(s.view().text, /loading~spin/);
  s.progress({ kind: 'begin', message: 'loading model pair default', percentage: 0 });
  assert.equal(s.view().text, '$(loading~spin) CodeCue 0%');
  assert.equal(s.view().tooltip, 'loading model pair default');
  s.progress({ kind: 'report', percentage: 60 });
  assert.equal(s.view().text, '$(loading~spin) CodeCue 60%');
  s.progress({ kind: 'end', message: 'model pair default ready' });
  assert.equal(s.view().text, '$(check) CodeCue');
  s.latency(84.6);
  assert.equal(s.view().text, '$(check) CodeCue 85 ms');
  assert.equal(s.view().error, false);
});

test('a failed load is an error with its message', () => {
  const s = new Status();
  s.progress({ kind: 'begin' });
  s.progress({ kind: 'end', message: 'model loading failed' });
  const view = s.view();
  assert.equal(view.error, true);
  assert.match(view.tooltip, /model loading failed/);
});

test('off wins over every phase; stopped and start errors show as errors', () => {
  const s = new Status();
  s.enabled = false;
  assert.match(s.view().text, /circle-slash/);
  s.enabled = true;
  s.failed('could not start codecue-lsp: ENOENT');
  assert.match(s.view().tooltip, /ENOENT/);
  s.stopped();
  assert.equal(s.view().error, true);
});

test('a click restarts a crashed or failed server, and otherwise turns suggestions off or on', () => {
  const s = new Status();
  s.running();
  s.progress({ kind: 'end', message: 'model pair default ready' });
  assert.equal(s.clickAction(), 'toggle');
  s.stopped(); // the client gave up restarting it
  assert.equal(s.view().text, '$(debug-disconnect) CodeCue crashed');
  assert.match(s.view().tooltip, /Click to restart/);
  assert.equal(s.clickAction(), 'restart');
  s.failed('could not start codecue-lsp: ENOENT');
  assert.equal(s.clickAction(), 'restart');
  s.enabled = false;
  assert.equal(s.clickAction(), 'toggle', 'off: a click turns suggestions on');
  s.enabled = true;
  s.starting();
  assert.equal(s.clickAction(), 'toggle');
});
