// Type-level check of the binding's declarations (compiled with `tsc --noEmit`, never run).
import * as lls from '../../bindings/node';

export async function typed(session: lls.Session): Promise<number> {
  const agent = new lls.Agent(session, { config: { provider: 'openai', model: 'm' }, system: 's' });
  agent.addPrefixListener(async ({ rest }, { signal }) => (signal.aborted ? rest : [{ role: 'user', content: [] }, ...rest]));
  agent.addPreStepListener(() => undefined);
  agent.setSummariser(async (input: lls.SummaryInput) => ({ text: `${input.request.messages.length}` }));
  agent.setTokenCounter((item) => (item.kind === 'system' ? item.text.length : { tokens: 1 }));
  agent.startTurn('hello');
  const req: lls.BuiltRequest = await agent.nextRequest({ signal: AbortSignal.timeout(1000) });
  const body: string = lls.render('openai', req.json, req.info.prefixLen);
  try {
    await agent.compact({ span: [0, 1] });
  } catch (e) {
    if (e instanceof lls.LlmSessionError && e.status === lls.Status.SUMMARISER) return e.detail.status;
  }
  agent.close();
  return body.length;
}

// Content blocks and stream deltas are unions discriminated on `type`: a check narrows them.
export function toolCalls(response: lls.ParsedResponse): { id: string; name: string; args: unknown }[] {
  const calls: { id: string; name: string; args: unknown }[] = [];
  for (const block of response.message.content) {
    switch (block.type) {
      case 'tool-call':
        calls.push({ id: block.id, name: block.name, args: JSON.parse(block.arguments) });
        break;
      case 'tool-result': {
        const inner: lls.Block[] = block.content;
        const failed: boolean = block.isError;
        void inner, void failed;
        break;
      }
      case 'text':
      case 'reasoning': {
        const text: string = block.text;
        void text;
        break;
      }
      default: {
        const other: 'image' | 'file' | 'redacted-thinking' | 'opaque' = block.type;
        void other;
      }
    }
  }
  return calls;
}

export function display(delta: lls.Delta): string {
  if (delta.type === 'tool-call') return `${delta.name ?? ''}${delta.arguments}`;
  return delta.text;
}

/** The observer hook's types (docs/observe.md). */
export function observerTypes(): void {
  lls.setObserver((o: lls.Observation) => {
    const kind: string = o.kind;
    const level: lls.ObservationLevel = o.level;
    if (kind === 'log-cut' && level === 'warn') console.log(o.message, o.sessionId, o.records);
  }, { level: 'warn' });
  lls.setObserver(null);
  lls.observer.level = 'debug';
  const onWarn = (o: lls.Observation) => console.log(o.message);
  lls.observer.on('warn', onWarn).off('warn', onWarn);
}

/** Tool calls as data (docs/node.md, "With the official SDKs"): what recordBody gives. */
export function recorded(agent: lls.Agent, completion: object): string[] {
  const rec: lls.Recorded = agent.recordBody(completion);
  const count: number = rec.toolCallCount;
  const finish: lls.FinishReason | undefined = rec.finishReason;
  const calls: lls.ToolCall[] = rec.toolCalls;
  const again: lls.ToolCall[] = lls.toolCalls({ message: { role: 'assistant', content: [] } });
  return [...calls, ...again].map((c) => `${c.id} ${c.name} ${c.argumentsJson} ${JSON.stringify(c.arguments)} ${count} ${finish ?? ''}`);
}
