'use strict';
// The Node naive-host harness of benches/bindings.sh (docs/performance.md, "The provider body
// against a naive host"):
//
//   node bench/naive_host.js DIR ITERATIONS OUT [body|render]
//
// llmsession and a naive Node host build the same OpenAI chat-completions body side by side,
// step by step, on the fixture in DIR (`bench_bindings write DIR N`, plus the provider replies
// in DIR/replies.jsonl that the driver writes). The naive host is what a Node host without the
// library does: it keeps the body as plain JS objects (the messages in the provider's shape) and
// per step parses the provider's reply with JSON.parse, appends the assistant message and the
// tool result, and serialises the whole body with JSON.stringify. It starts from the first
// request's body as the library rendered it, parsed (untimed), so both start on identical bytes;
// after every step the bodies are compared byte for byte and the harness fails (exit 1) on the
// first difference.
//
// llmsession: "body" (the default) is the hot path: setRenderer once, then per step
// recordBody(reply), recordToolResult and `await nextBody()`, released once compared; "render"
// is the path before it (parseResponse, recordResponse, recordToolResult, nextRequest and
// renderWithOptions of the envelope).
//
// Each step times the pair back to back, in alternating order: "next" is the body build alone
// (for llmsession with its release, after the comparison), "step" the whole step. Round 0 warms up. Appends "lls_next naive_next lls_step naive_step"
// (ns) per timed step to OUT, writes the last body of the first timed round to OUT.body and
// prints "bytes=N digest=D" (the body's length, the envelope's digest).
const fs = require('fs');
const path = require('path');
const lls = require('..');

const now = () => process.hrtime.bigint();

/** llmsession's side: `body` is the last body built (a Buffer), valid until `done()`. */
class LlsHost {
  constructor(agent, mode) {
    this.agent = agent;
    this.mode = mode;
    this.body = null;
    this.digest = '';
    this._result = null;
    if (mode === 'body') agent.setRenderer('openai');
    else if (mode !== 'render') throw new Error(`mode ${mode}: expected "body" or "render"`);
  }

  record(reply, result) {
    if (this.mode === 'body') this.agent.recordBody(reply);
    else this.agent.recordResponse(lls.parseResponse('openai', reply));
    this.agent.recordToolResult(result);
  }

  async build() {
    if (this.mode === 'body') {
      const b = await this.agent.nextBody();
      this._result = b;
      this.body = b.body;
      this.digest = b.info.digest;
    } else {
      const r = await this.agent.nextRequest();
      this._result = r;
      this.body = Buffer.from(lls.renderWithOptions('openai', r.bytes, { prefixLen: r.info.prefixLen }));
      this.digest = r.info.digest;
    }
  }

  done() {
    this.body = null;
    if (this._result) this._result.release();
    this._result = null;
  }
}

/** The naive host: the body as JS objects, keys in the library's (sorted) order. */
class NaiveHost {
  constructor(first) {
    this.state = JSON.parse(first.toString('utf8'));
    this.text = null;
    this.build();
    if (!Buffer.from(this.text).equals(first)) throw new Error(`the naive host does not write the first body back: ${difference(Buffer.from(this.text), first)}`);
  }

  record(reply, result) {
    const r = JSON.parse(reply);
    const m = r.choices[0].message;
    const msg = { content: m.content, role: m.role };
    if (m.tool_calls) {
      msg.tool_calls = m.tool_calls.map((c) => ({
        function: { arguments: c.function.arguments, name: c.function.name },
        id: c.id,
        type: c.type,
      }));
    }
    const t = JSON.parse(result);
    this.state.messages.push(msg, {
      content: t.content.map((b) => b.text).join('\n'),
      role: 'tool',
      tool_call_id: t.callId,
    });
  }

  build() {
    this.text = JSON.stringify(this.state);
  }
}

function difference(got, want) {
  let i = 0;
  while (i < got.length && i < want.length && got[i] === want[i]) i++;
  const from = Math.max(0, i - 60);
  return `${got.length} and ${want.length} bytes, first difference at byte ${i}: ${JSON.stringify(got.subarray(from, i + 60).toString())} instead of ${JSON.stringify(want.subarray(from, i + 60).toString())}`;
}

async function main() {
  const [dir, iterArg, outFile, mode = 'body'] = process.argv.slice(2);
  if (!outFile) {
    console.error('usage: node bench/naive_host.js DIR ITERATIONS OUT [body|render]');
    process.exit(2);
  }
  const iterations = Number(iterArg);
  const read = (f) => fs.readFileSync(path.join(dir, f), 'utf8').split('\n').filter((l) => l.length > 0);
  const lines = read('inputs.jsonl');
  const replies = read('replies.jsonl');
  const [agentOpts, forkOpts, user] = lines;
  const exchanges = lines.slice(3);
  if (replies.length !== exchanges.length / 2) throw new Error(`replies.jsonl has ${replies.length} replies for ${exchanges.length / 2} exchanges`);
  const parent = lls.Session.openFile(path.join(dir, 'session.jsonl'), { durability: 'never' });
  const samples = [];
  let last = null;
  let digest = '';
  for (let round = 0; samples.length < iterations; round++) {
    const child = parent.fork(forkOpts);
    const agent = new lls.Agent(child, agentOpts);
    agent.startTurn(JSON.parse(user));
    const h = new LlsHost(agent, mode);
    await h.build();
    const naive = new NaiveHost(h.body);
    h.done();
    for (let k = 0; k + 1 < exchanges.length && (round === 0 || samples.length < iterations); k += 2) {
      const reply = replies[k / 2];
      const result = exchanges[k + 1];
      let ln, ls, nn, ns;
      const llsStep = async () => {
        const t0 = now();
        h.record(reply, result);
        const t1 = now();
        await h.build();
        const t2 = now();
        ln = t2 - t1;
        ls = t2 - t0;
      };
      const naiveStep = () => {
        const t0 = now();
        naive.record(reply, result);
        const t1 = now();
        naive.build();
        const t2 = now();
        nn = t2 - t1;
        ns = t2 - t0;
      };
      if ((k / 2) % 2 === 0) {
        await llsStep();
        naiveStep();
      } else {
        naiveStep();
        await llsStep();
      }
      const naiveBytes = Buffer.from(naive.text);
      if (!naiveBytes.equals(h.body)) {
        console.error(`naive_host.js: round ${round}, exchange ${k / 2}: the naive host's body differs from llmsession's: ${difference(naiveBytes, h.body)}`);
        process.exit(1);
      }
      if (round === 1) {
        last = Buffer.from(h.body);
        digest = h.digest;
      }
      // Giving the body back is part of llmsession's cost (after the comparison, which reads it).
      const r0 = now();
      h.done();
      const r = now() - r0;
      if (round > 0) samples.push(`${ln + r} ${nn} ${ls + r} ${ns}`);
    }
    agent.close();
    child.close();
  }
  parent.close();
  fs.writeFileSync(outFile, samples.join('\n') + '\n');
  fs.writeFileSync(`${outFile}.body`, last);
  console.log(`bytes=${last.length} digest=${digest}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
