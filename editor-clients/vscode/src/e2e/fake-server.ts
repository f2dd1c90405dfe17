// A stand-in codecue-lsp for the code-server feature test (features.ts): it answers from a fixed list of lines, as
// the server's contract says (an automatic request gets one item, an invoked one up to three), reports a model load
// with $/progress, and writes what it gets (its start, the settings it pulls, each request and its answer, the
// codecue/* notifications) as JSON lines to $FAKE_LOG, for the test to check. Run by node; stdio only.
//
// Env: FAKE_LOG (the event file), FAKE_LINES (a JSON list of lines: a request gets those that continue what is
// typed on the cursor's line after its indentation).
import { appendFileSync } from 'node:fs';
import {
  createProtocolConnection, InlineCompletionParams, StreamMessageReader, StreamMessageWriter,
} from 'vscode-languageserver-protocol/node';

const LOG = process.env.FAKE_LOG ?? '';
const LINES: string[] = JSON.parse(process.env.FAKE_LINES ?? '[]');
const INVOKED = 1; // InlineCompletionTriggerKind.Invoked: the user asked (VS Code's trigger, next/previous)
const MAX_ITEMS = 3;

function record(event: string, data: Record<string, unknown> = {}): void {
  appendFileSync(LOG, `${JSON.stringify({ event, pid: process.pid, ...data })}\n`);
}

const connection = createProtocolConnection(new StreamMessageReader(process.stdin), new StreamMessageWriter(process.stdout));
const documents = new Map<string, string>();

async function pullConfiguration(): Promise<void> {
  const answer = await connection.sendRequest('workspace/configuration', { items: [{ section: 'codecue' }] });
  record('configuration', { settings: (answer as unknown[])[0] });
}

connection.onRequest('initialize', () => ({
  capabilities: { textDocumentSync: 1, inlineCompletionProvider: true }, // 1: the whole text on each change
  serverInfo: { name: 'codecue-fake', version: '0' },
}));

connection.onNotification('initialized', async () => {
  record('start');
  await connection.sendRequest('window/workDoneProgress/create', { token: 'codecue-load-fake' });
  await connection.sendNotification('$/progress', { token: 'codecue-load-fake', value: { kind: 'begin', title: 'CodeCue', message: 'loading' } });
  await connection.sendNotification('$/progress', { token: 'codecue-load-fake', value: { kind: 'end', message: 'fake pair ready' } });
  await pullConfiguration();
});

connection.onNotification('workspace/didChangeConfiguration', () => pullConfiguration());
connection.onNotification('textDocument/didOpen', (p: { textDocument: { uri: string; text: string } }) => {
  documents.set(p.textDocument.uri, p.textDocument.text);
});
connection.onNotification('textDocument/didChange', (p: { textDocument: { uri: string }; contentChanges: { text: string }[] }) => {
  documents.set(p.textDocument.uri, p.contentChanges[p.contentChanges.length - 1].text);
});

connection.onRequest('textDocument/inlineCompletion', (p: InlineCompletionParams) => {
  const { line, character } = p.position;
  const text = (documents.get(p.textDocument.uri) ?? '').split('\n')[line]?.replace(/\r$/, '') ?? '';
  const before = text.slice(0, character);
  const indent = before.length - before.trimStart().length;
  const typed = before.slice(indent);
  const matching = LINES.filter((l) => l.startsWith(typed) && l !== typed);
  const chosen = p.context.triggerKind === INVOKED ? matching.slice(0, MAX_ITEMS) : matching.slice(0, 1);
  record('request', { uri: p.textDocument.uri, line, character, triggerKind: p.context.triggerKind, items: chosen });
  return {
    items: chosen.map((insertText) => ({
      insertText, range: { start: { line, character: indent }, end: { line, character: Math.max(character, text.length) } },
    })),
  };
});

for (const method of ['codecue/didShowCompletion', 'codecue/didAcceptCompletion', 'codecue/didRejectCompletion']) {
  connection.onNotification(method, (params: Record<string, unknown>) => record(method, { params }));
}
connection.onRequest('shutdown', () => null);
connection.onNotification('exit', () => process.exit(0));
connection.listen();
