'use strict';
// Binding overhead (docs/performance.md): the Node harness of benches/bindings.sh.
//
//   node bench/next_request.js DIR ITERATIONS OUT [body|request]
//
// Same procedure as examples/bench_bindings.rs (see there): per round, fork DIR/session.jsonl
// into memory, create an agent, open a turn, build the first request (untimed), then for each
// exchange record the response and the tool result and build the next request, timing the step
// and the request alone with process.hrtime. Round 0 warms up.
//
// "body" (the default): the hot path. The agent gets the "openai" renderer; per exchange
// `agent.recordBody(reply)` (the raw provider reply of DIR/replies.jsonl, which the driver
// writes), `agent.recordToolResult(...)` and `await agent.nextBody()` (a Buffer over the
// library's memory), released once read, as a host does once it has sent the body; the release
// is timed with the request. "request": the envelope path, `agent.recordResponse(...)` of the
// parsed message and `await agent.nextRequest()`, released likewise.
//
// Writes "next_ns step_ns" per iteration to OUT; in "body" mode the last body of the first timed
// round to OUT.body; prints "bytes=N digest=D" (that request's length and digest).
const fs = require('fs');
const path = require('path');
const lls = require('..');

async function main() {
  const [dir, iterArg, outFile, mode = 'body'] = process.argv.slice(2);
  if (!outFile || (mode !== 'body' && mode !== 'request')) {
    console.error('usage: node bench/next_request.js DIR ITERATIONS OUT [body|request]');
    process.exit(2);
  }
  const body = mode === 'body';
  const iterations = Number(iterArg);
  const read = (f) => fs.readFileSync(path.join(dir, f), 'utf8').split('\n').filter((l) => l.length > 0);
  const lines = read('inputs.jsonl');
  const [agentOpts, forkOpts, user] = lines;
  const exchanges = lines.slice(3);
  const replies = body ? read('replies.jsonl').map((l) => Buffer.from(l)) : null;
  const parent = lls.Session.openFile(path.join(dir, 'session.jsonl'), { durability: 'never' });
  const samples = [];
  let bytes = 0;
  let digest = '';
  let last = null;
  for (let round = 0; samples.length < iterations; round++) {
    const child = parent.fork(forkOpts);
    const agent = new lls.Agent(child, agentOpts);
    if (body) agent.setRenderer('openai');
    agent.startTurn(JSON.parse(user));
    (body ? await agent.nextBody() : await agent.nextRequest()).release();
    for (let k = 0; k + 1 < exchanges.length && (round === 0 || samples.length < iterations); k += 2) {
      let excluded = 0n;
      const t0 = process.hrtime.bigint();
      if (body) agent.recordBody(replies[k / 2]);
      else agent.recordResponse(exchanges[k]);
      agent.recordToolResult(exchanges[k + 1]);
      const t1 = process.hrtime.bigint();
      let r;
      if (body) {
        r = await agent.nextBody();
        if (round === 1) {
          bytes = r.body.length;
          // The copy for OUT.body is not part of the step: its time is taken out.
          const c0 = process.hrtime.bigint();
          last = Buffer.from(r.body);
          excluded = process.hrtime.bigint() - c0;
        }
      } else {
        r = await agent.nextRequest();
        if (round === 1) bytes = r.bytes.length;
      }
      r.release();
      const t2 = process.hrtime.bigint();
      if (round === 1) digest = r.info.digest;
      if (round > 0) samples.push(`${t2 - t1 - excluded} ${t2 - t0 - excluded}`);
    }
    agent.close();
    child.close();
  }
  parent.close();
  fs.writeFileSync(outFile, samples.join('\n') + '\n');
  if (body) fs.writeFileSync(`${outFile}.body`, last);
  console.log(`bytes=${bytes} digest=${digest}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
