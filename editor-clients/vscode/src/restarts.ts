// When to start a crashed server again. vscode-languageclient's default handler also shuts the client down after
// three failed writes, and every write to a server that has just died fails (a keystroke's didChange, a telemetry
// notification): whether a crash is answered with a restart would depend on what was in flight. Here only the exit
// decides, with the default's own limit: a server that crashed more than MAX_RESTARTS times within
// RESTART_WINDOW_MS is not started again (the status item then says "CodeCue crashed"; a click restarts it).
export const MAX_RESTARTS = 4;
export const RESTART_WINDOW_MS = 3 * 60 * 1000;

export class RestartPolicy {
  private crashes: number[] = [];

  constructor(private readonly now: () => number = Date.now) {}

  /** The server's connection closed without a stop: restart it, or give up. */
  closed(): 'restart' | 'give up' {
    this.crashes.push(this.now());
    if (this.crashes.length <= MAX_RESTARTS) {
      return 'restart';
    }
    if (this.crashes[this.crashes.length - 1] - this.crashes[0] <= RESTART_WINDOW_MS) {
      return 'give up';
    }
    this.crashes.shift();
    return 'restart';
  }
}
