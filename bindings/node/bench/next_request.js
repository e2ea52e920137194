'use strict';
// Binding overhead (docs/performance.md): the Node harness of benches/bindings.sh.
//
//   node bench/next_request.js DIR ITERATIONS OUT
//
// Same procedure as examples/bench_bindings.rs (see there): per round, fork DIR/session.jsonl
// into memory, create an agent, open a turn, build the first request (untimed), then for each
// exchange of DIR/inputs.jsonl record the response and the tool result and build the next
// request with `await agent.nextRequest()` (what a Node host gets: the envelope as a Buffer,
// its string and parsed forms decoded only on access), timing the step and the
// request alone with process.hrtime. Round 0 warms up. Writes "next_ns step_ns" per iteration
// to OUT; prints "bytes=N digest=D" (the last request of the first timed round).
const fs = require('fs');
const path = require('path');
const lls = require('..');

async function main() {
  const [dir, iterArg, outFile] = process.argv.slice(2);
  if (!outFile) {
    console.error('usage: node bench/next_request.js DIR ITERATIONS OUT');
    process.exit(2);
  }
  const iterations = Number(iterArg);
  const lines = fs.readFileSync(path.join(dir, 'inputs.jsonl'), 'utf8').split('\n').filter((l) => l.length > 0);
  const [agentOpts, forkOpts, user] = lines;
  const exchanges = lines.slice(3);
  const parent = lls.Session.openFile(path.join(dir, 'session.jsonl'), { durability: 'never' });
  const samples = [];
  let bytes = 0;
  let digest = '';
  for (let round = 0; samples.length < iterations; round++) {
    const child = parent.fork(forkOpts);
    const agent = new lls.Agent(child, agentOpts);
    agent.startTurn(JSON.parse(user));
    await agent.nextRequest();
    for (let k = 0; k + 1 < exchanges.length && (round === 0 || samples.length < iterations); k += 2) {
      const t0 = process.hrtime.bigint();
      agent.recordResponse(exchanges[k]);
      agent.recordToolResult(exchanges[k + 1]);
      const t1 = process.hrtime.bigint();
      const req = await agent.nextRequest();
      const t2 = process.hrtime.bigint();
      bytes = req.bytes.length;
      if (round === 1) digest = req.info.digest;
      if (round > 0) samples.push(`${t2 - t1} ${t2 - t0}`);
    }
    agent.close();
    child.close();
  }
  parent.close();
  fs.writeFileSync(outFile, samples.join('\n') + '\n');
  console.log(`bytes=${bytes} digest=${digest}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
