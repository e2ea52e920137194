// The README's Node example: one turn through llmsession, with a canned provider reply.
const lls = require('../../bindings/node'); // installed as a package: require('llmsession')

async function main() {
  const session = lls.Session.openFile('hello.jsonl');
  const agent = new lls.Agent(session, { config: { provider: 'llama.cpp', model: 'smollm2' }, system: 'Be brief.' });
  agent.setRenderer('openai'); // bodies for /chat/completions
  agent.startTurn('Hi!');
  const { body } = await agent.nextBody(); // a Buffer to POST; logged, verify() rebuilds it byte for byte
  const reply = JSON.stringify({
    choices: [{ message: { role: 'assistant', content: 'Hello!' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 14, completion_tokens: 3 },
  });
  agent.recordBody(reply); // the provider's raw answer
  agent.endTurn('completed');
  console.log(`sent ${body.length} bytes; verify: ${JSON.stringify(session.verify())}`);
  agent.close();
  session.close();
}

main().catch((e) => {
  console.error(e.message);
  process.exit(1);
});
