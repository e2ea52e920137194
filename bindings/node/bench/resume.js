'use strict';
// The Node resume harness of benches/bindings.sh (docs/performance.md, "Resume and memory
// against a naive host"), on the resume fixture in DIR (`bench_bindings write-log DIR EVENTS`):
//
//   node bench/resume.js time DIR ITERATIONS OUT
//   node --expose-gc bench/resume.js memory DIR
//
// `time` runs, back to back in alternating order, per iteration:
// - the naive host's resume: readFileSync of DIR/session.jsonl and JSON.parse of every line
//   (what a Node host that keeps its own JSONL log does to get its state back; it checks
//   nothing and builds no body);
// - llmsession's: Session.openFile of a fresh copy of the log (the copy is untimed; the open
//   reads, checks the hash chain and every event, and derives the history), new Agent,
//   setRenderer, startTurn of the next user message and `await nextBody()`, then release() and
//   close().
// Iteration 0 warms up. Appends "lls_ns naive_ns" per timed iteration to OUT and prints
// "bytes=N digest=D" (the body built).
//
// `memory` opens the small log DIR/warm/session.jsonl, builds its body and closes it (the
// library's one-off costs), reads
// process.memoryUsage().rss after a collection, opens a fresh copy of the log,
// reads it again, builds the next body (held), reads it a third time and prints "memory
// file=BYTES open_kib=GROWTH body_kib=GROWTH" (growth of the resident size over the first
// reading).
const fs = require('fs');
const os = require('os');
const path = require('path');
const lls = require('..');

const now = () => process.hrtime.bigint();

function inputs(dir) {
  const lines = fs.readFileSync(path.join(dir, 'inputs.jsonl'), 'utf8').split('\n').filter((l) => l.length > 0);
  return { agentOpts: lines[0], user: JSON.parse(lines[2]) };
}

async function resumeLls(file, inp) {
  const s = lls.Session.openFile(file, { durability: 'never' });
  const a = new lls.Agent(s, inp.agentOpts);
  a.setRenderer('openai');
  a.startTurn(inp.user);
  const b = await a.nextBody();
  const res = { bytes: b.body.length, digest: b.info.digest };
  b.release();
  a.close();
  s.close();
  return res;
}

function resumeNaive(file) {
  const text = fs.readFileSync(file, 'utf8');
  const events = [];
  for (const l of text.split('\n')) if (l.length > 0) events.push(JSON.parse(l));
  return events;
}

async function time(dir, iterations, outFile) {
  const inp = inputs(dir);
  const log = path.join(dir, 'session.jsonl');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lls-resume-'));
  const samples = [];
  let res = null;
  try {
    for (let i = 0; samples.length < iterations; i++) {
      const copy = path.join(tmp, `resume-${i}.jsonl`);
      fs.copyFileSync(log, copy);
      let l, n;
      const llsRun = async () => {
        const t0 = now();
        res = await resumeLls(copy, inp);
        l = now() - t0;
      };
      const naiveRun = () => {
        const t0 = now();
        resumeNaive(log);
        n = now() - t0;
      };
      if (i % 2 === 0) {
        await llsRun();
        naiveRun();
      } else {
        naiveRun();
        await llsRun();
      }
      fs.rmSync(copy, { force: true });
      if (i > 0) samples.push(`${l} ${n}`);
    }
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  fs.writeFileSync(outFile, samples.join('\n') + '\n');
  console.log(`bytes=${res.bytes} digest=${res.digest}`);
}

async function memory(dir) {
  const inp = inputs(dir);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lls-resume-'));
  const copy = path.join(tmp, 'resume.jsonl');
  fs.copyFileSync(path.join(dir, 'session.jsonl'), copy);
  const size = fs.statSync(copy).size;
  const rss = () => {
    if (global.gc) global.gc();
    return Math.round(process.memoryUsage().rss / 1024);
  };
  try {
    // The library's one-off costs (loading it, its code paged in, lazily built tables, the
    // allocator's first arenas) are not the session's: a small log of the same shape
    // (DIR/warm, benches/bindings.sh writes it) is opened, a body built and everything closed
    // before the first reading.
    const warm = path.join(tmp, 'warm.jsonl');
    fs.copyFileSync(path.join(dir, 'warm', 'session.jsonl'), warm);
    {
      const ws = lls.Session.openFile(warm, { durability: 'never' });
      const wa = new lls.Agent(ws, inp.agentOpts);
      wa.setRenderer('openai');
      wa.startTurn(inp.user);
      (await wa.nextBody()).release();
      wa.close();
      ws.close();
    }
    const before = rss();
    const s = lls.Session.openFile(copy, { durability: 'never' });
    const opened = rss();
    const a = new lls.Agent(s, inp.agentOpts);
    a.setRenderer('openai');
    a.startTurn(inp.user);
    const b = await a.nextBody();
    const built = rss();
    console.log(`memory file=${size} open_kib=${opened - before} body_kib=${built - before} body=${b.body.length}`);
    b.release();
    a.close();
    s.close();
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

async function main() {
  const [what, dir, iterArg, outFile] = process.argv.slice(2);
  if (what === 'time' && outFile) await time(dir, Number(iterArg), outFile);
  else if (what === 'memory' && dir) await memory(dir);
  else {
    console.error('usage: node bench/resume.js time DIR ITERATIONS OUT | memory DIR');
    process.exit(2);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
