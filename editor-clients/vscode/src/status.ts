// What the status bar item says: loading progress, ready (with the last latency), off, crashed or an error, and what
// a click on it does. Pure state; extension.ts copies `view()` into a vscode.StatusBarItem.

// idle: no document of an enabled language has been opened, so no server runs yet. stopped: the server exited and
// the client did not restart it (it restarts a crashed server by itself until it has crashed too often).
export type Phase = 'idle' | 'starting' | 'loading' | 'ready' | 'error' | 'stopped';

export interface ProgressValue {
  kind: 'begin' | 'report' | 'end';
  message?: string;
  percentage?: number;
}

export interface StatusView {
  text: string;
  tooltip: string;
  error: boolean;
}

export class Status {
  phase: Phase = 'starting';
  enabled = true;
  percentage?: number;
  message?: string;
  latencyMs?: number;
  error?: string;

  progress(value: ProgressValue): void {
    if (value.kind === 'end') {
      const failed = /fail/i.test(value.message ?? '');
      this.phase = failed ? 'error' : 'ready';
      this.error = failed ? value.message : undefined;
    } else {
      this.phase = 'loading';
      this.percentage = value.percentage ?? this.percentage;
    }
    this.message = value.message ?? this.message;
  }

  latency(ms: number): void {
    this.latencyMs = Math.round(ms);
    if (this.phase === 'starting') {
      this.phase = 'ready'; // a server that loads without reporting progress
    }
  }

  /** A (re)start: what the last server reported no longer holds. */
  starting(): void {
    this.phase = 'starting';
    this.percentage = undefined;
    this.message = undefined;
    this.error = undefined;
  }

  /** The server answered initialize. The model may still be loading: its progress, or the first answer, says
   * when it is ready. */
  running(): void {
    if (this.phase === 'stopped' || this.phase === 'error') {
      this.starting();
    }
  }

  failed(message: string): void {
    this.phase = 'error';
    this.error = message;
  }

  stopped(): void {
    this.phase = 'stopped';
  }

  /** A click turns suggestions off or on; on a server that crashed or failed, it starts the server again
   * instead: turning suggestions off would not bring them back. */
  clickAction(): 'toggle' | 'restart' {
    return this.enabled && (this.phase === 'stopped' || this.phase === 'error') ? 'restart' : 'toggle';
  }

  view(): StatusView {
    if (!this.enabled) {
      return { text: '$(circle-slash) CodeCue', tooltip: 'CodeCue is off (click to turn on)', error: false };
    }
    switch (this.phase) {
      case 'idle':
        return { text: '$(circle-outline) CodeCue', tooltip: 'CodeCue starts its server when a file of an enabled language opens', error: false };
      case 'starting':
        return { text: '$(loading~spin) CodeCue', tooltip: 'Starting codecue-lsp', error: false };
      case 'loading': {
        const pct = this.percentage !== undefined ? ` ${this.percentage}%` : '';
        return { text: `$(loading~spin) CodeCue${pct}`, tooltip: this.message ?? 'Loading the model', error: false };
      }
      case 'ready': {
        const latency = this.latencyMs !== undefined ? ` ${this.latencyMs} ms` : '';
        const last = this.latencyMs !== undefined ? ` (last suggestion ${this.latencyMs} ms)` : '';
        return { text: `$(check) CodeCue${latency}`, tooltip: `CodeCue ready${last}. Click to turn off.`, error: false };
      }
      case 'error':
        return {
          text: '$(error) CodeCue',
          tooltip: `CodeCue: ${this.error ?? 'error'} (see CodeCue: Show Server Log). Click to restart the server.`,
          error: true,
        };
      case 'stopped':
        return {
          text: '$(debug-disconnect) CodeCue crashed',
          tooltip: 'codecue-lsp crashed and was not restarted (see CodeCue: Show Server Log). Click to restart it.',
          error: true,
        };
    }
  }
}
