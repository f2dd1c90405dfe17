import { strict as assert } from 'node:assert';
import { test } from 'node:test';

import { MAX_RESTARTS, RESTART_WINDOW_MS, RestartPolicy } from '../restarts';

test('a crashed server is restarted MAX_RESTARTS times within the window, then given up', () => {
  let now = 0;
  const policy = new RestartPolicy(() => now);
  const answers = [];
  for (let crash = 0; crash <= MAX_RESTARTS; crash++) {
    answers.push(policy.closed());
    now += 1000;
  }
  assert.deepEqual(answers, [...Array(MAX_RESTARTS).fill('restart'), 'give up']);
});

test('crashes spread over more than the window keep being restarted', () => {
  let now = 0;
  const policy = new RestartPolicy(() => now);
  for (let crash = 0; crash < 3 * MAX_RESTARTS; crash++) {
    assert.equal(policy.closed(), 'restart', `crash ${crash}`);
    now += RESTART_WINDOW_MS / MAX_RESTARTS + 1;
  }
});
