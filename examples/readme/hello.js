// The README's Node example: one turn through llmsession, with a canned provider reply.
const lls = require('../../bindings/node'); // installed as a package: require('llmsession')

async function main() {
  const session = lls.Session.openFile('hello.jsonl');
  const agent = new lls.Agent(session, { config: { provider: 'llama.cpp', model: 'smollm2' }, system: 'Be brief.' });
  agent.startTurn('Hi!');
  const { bytes, info } = await agent.nextRequest(); // logged; verify() rebuilds it byte for byte
  const body = lls.render('openai', bytes, info.prefixLen); // POST to /chat/completions
  const reply = {
    choices: [{ message: { role: 'assistant', content: 'Hello!' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 14, completion_tokens: 3 },
  };
  agent.recordResponse(lls.parseResponse('openai', reply));
  agent.endTurn('completed');
  console.log(`sent ${body.length} bytes; verify: ${JSON.stringify(session.verify())}`);
  agent.close();
  session.close();
}

main().catch((e) => {
  console.error(e.message);
  process.exit(1);
});
