// TypeScript declarations of the llmsession Node binding (index.js). See docs/node.md.

/** A JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * A content block: a union discriminated on `type`, so `if (block.type === 'tool-call')`
 * narrows to {@link ToolCallBlock}. Every kind may carry more fields (a provider's `origin`,
 * `itemId`, `thoughtSignature`, ...; docs/render.md, "Provider-native blocks"), which the
 * library keeps as they are.
 */
export type Block =
  | TextBlock
  | ReasoningBlock
  | ToolCallBlock
  | ToolResultBlock
  | ImageBlock
  | FileBlock
  | RedactedThinkingBlock
  | OpaqueBlock;

/** The block kinds, `Block['type']`. */
export type BlockType = Block['type'];

/** Answer text. */
export interface TextBlock {
  type: 'text';
  text: string;
  [key: string]: Json | undefined;
}

/** Reasoning (thinking) text; `signature` is Anthropic's thinking signature. */
export interface ReasoningBlock {
  type: 'reasoning';
  text: string;
  signature?: string;
  [key: string]: Json | undefined;
}

/** A tool call the model made: `arguments` is the JSON text of the arguments. */
export interface ToolCallBlock {
  type: 'tool-call';
  id: string;
  name: string;
  arguments: string;
  [key: string]: Json | undefined;
}

/** The result of a tool call, answering the call `toolCallId`. */
export interface ToolResultBlock {
  type: 'tool-result';
  toolCallId: string;
  content: Block[];
  isError: boolean;
  [key: string]: Json | Block[] | undefined;
}

/** An image: either `url`, or `mediaType` with base64 `data`. */
export interface ImageBlock {
  type: 'image';
  url?: string;
  mediaType?: string;
  data?: string;
  [key: string]: Json | undefined;
}

/**
 * A file (a document, audio, video, an image): its `mediaType` and one of base64 `data`, a `url`
 * or the `fileId` (or URI) the provider's Files API gave it, with its `filename`. Each format
 * renders it or refuses it naming the block and the format (docs/render.md).
 */
export interface FileBlock {
  type: 'file';
  mediaType: string;
  data?: string;
  url?: string;
  fileId?: string;
  filename?: string;
  [key: string]: Json | undefined;
}

/**
 * A tool: a function tool `{name, description?, parameters}` (OpenAI's
 * `{type: 'function', function: {...}}` is read too), or a provider's own tool sent verbatim to
 * its format only (docs/render.md, "Tools").
 */
export type Tool =
  | { name: string; description?: string | null; parameters: { [key: string]: Json }; [key: string]: Json | undefined }
  | { type: 'function'; function: { name: string; description?: string | null; parameters: { [key: string]: Json } } }
  | ProviderTool;

/** A provider (server-side) tool: `format` is the renderer name, `tool` the provider's object. */
export interface ProviderTool {
  type: 'provider';
  format: 'anthropic' | 'openai-responses' | 'openai' | 'gemini' | 'gemini-interactions';
  tool: { [key: string]: Json };
}

/** Anthropic's redacted thinking, carried back verbatim. */
export interface RedactedThinkingBlock {
  type: 'redacted-thinking';
  data: string;
  [key: string]: Json | undefined;
}

/** A provider's native item the vocabulary has no block for, kept for that provider (`origin`). */
export interface OpaqueBlock {
  type: 'opaque';
  origin: string;
  item: { [key: string]: Json };
  [key: string]: Json | undefined;
}

/** A message of a request or of the history. */
export interface Message {
  role: 'user' | 'assistant' | 'tool' | string;
  content: Block[];
  [key: string]: Json | Block[] | undefined;
}

/** Token usage reported by a provider. */
export interface Usage {
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens?: number;
  cacheWriteTokens?: number;
  reasoningTokens?: number;
  [key: string]: Json | undefined;
}

/** A request envelope as llmsession builds it (render it with `render`). */
export interface Envelope {
  provider: string;
  model: string;
  system?: string;
  tools?: Json[];
  messages: Message[];
  purpose: 'conversation' | 'compaction' | string;
  sessionId?: string;
  turn?: number;
  step?: number;
  maxTokens?: number;
  [key: string]: Json | Message[] | undefined;
}

/** The call config every request carries. */
export interface CallConfig {
  provider: string;
  model: string;
  [key: string]: Json | undefined;
}

/** A compaction policy. */
export interface Policy {
  contextWindow: number;
  threshold?: number;
  retainedRatio?: number;
  retainedTokens?: number;
  summaryMaxTokens?: number;
  retries?: number;
  overflowRetries?: number;
  summaryProvider?: string;
  summaryModel?: string;
}

/** A policy per model. */
export interface PolicyTable {
  default?: Policy;
  models?: { [model: string]: Policy };
}

/** Options of an agent instance (`lls_agent_new`). */
export interface AgentOptions {
  config: CallConfig;
  system?: string;
  tools?: Json[];
  checkRequests?: boolean;
  policy?: Policy | PolicyTable;
  tokenizer?: string;
}

/**
 * When a session writes checkpoints (docs/log.md, "Checkpoints"): the derived state an open
 * needs, so that an open reads the log from the last one. Left-out keys take the defaults
 * (every 1000 events or 1 MiB of records, and at the end of each landed compaction; 0 turns a
 * trigger off); `false` writes none. Since ABI 2 minor 6.
 */
export type CheckpointOptions = false | { everyEvents?: number; everyBytes?: number; atCompaction?: boolean };

/** Options of a new session. */
export interface SessionOptions {
  id?: string;
  durability?: 'every-event' | 'turn-end' | 'never';
  /** When the session writes checkpoints. */
  checkpoints?: CheckpointOptions;
  /** How an open checks the stored log: from its last checkpoint (the default) or all of it. */
  check?: 'bounded' | 'full';
}

/** Options of `Session.openFile`. */
export interface FileOptions extends SessionOptions {
  /** Open without the write lock; nothing is created or changed; follow the writer with refresh(). */
  readOnly?: boolean;
  /** Permission bits of a log this open creates, in octal ("0640"); default "0600". */
  mode?: string | number;
  /** The largest log that is read, in bytes (default 8 GiB). */
  maxBytes?: number;
}

/** Options of `Session.fork`. */
export interface ForkOptions extends SessionOptions {
  seedLength?: number;
  path?: string;
  /** Fork into the store this URL names (a `postgres://` URL: a new session in that database). */
  url?: string;
}

/** Options of `Session.openUrl`. */
export interface UrlOptions extends SessionOptions {
  /** Open without the lock or lease; appends fail with status READ_ONLY. */
  readOnly?: boolean;
  /** Whether a writing open may create a missing session (default true). */
  create?: boolean;
  /** Files only: permission bits of a created log (default "0600"). */
  mode?: string | number;
  /** Files only: the largest log read, in bytes. */
  maxBytes?: number;
}

/** One session of a store, as `listSessions` reports it. */
export interface StoredSession {
  id: string;
  createdAt: number;
  /** For a fork or a spawned child: its parent (`spawned`: a child; `callId`: the call it answers). */
  parent?: { id: string; seedLength: number; spawned: boolean; callId?: string };
  events: number;
  chainHead?: string;
  updatedAt: number;
  /** Whether a writer holds the session now. */
  inUse: boolean;
}

/** A logged event. */
export interface SessionEvent {
  type: string;
  seq: number;
  time: number;
  data: { [key: string]: Json };
  surfaceOp?: Json;
  sources?: Json;
}

/** An event to append: no seq or time. */
export interface NewEvent {
  type: string;
  data: { [key: string]: Json };
  surfaceOp?: Json;
  sources?: Json;
}

/** What `Agent.nextRequest` describes about a request. */
export interface RequestInfo {
  turn: number;
  step: number;
  digest: string;
  bytes: number;
  prefixLen: number;
  messageCount: number;
  sharedMessages: number;
  instance: number;
  stepSeq: number;
  /** Set by `nextBody` and `keepaliveBody` (read from the library's fixed record). */
  purpose?: 'conversation' | 'compaction' | 'keepalive';
  /**
   * The Anthropic beta flags the request needs (native compaction's, header `anthropic-beta`);
   * from `requestInfo()` and `nextRequest`, absent when none.
   */
  betas?: string[];
}

/** A native compaction request (`Agent.beginNativeCompaction`): POST `body` to `endpoint`. */
export interface NativeRequest {
  format: 'anthropic' | 'openai-responses';
  endpoint: string;
  /** The `anthropic-beta` flags to send (empty for OpenAI). */
  betas: string[];
  /** The logged request envelope (JSON text; its SHA-256 is `digest`). */
  envelope: string;
  /** The provider body to POST (JSON text). */
  body: string;
  digest: string;
  /** The surface span the block will replace, and its seqs. */
  span: [number, number];
  seqs: number[];
  messageCount: number;
  sharedMessages: number;
}

/** How a native compaction ended. */
export interface NativeOutcome {
  outcome: 'landed' | 'failed';
  format: string;
  span: [number, number];
  seqs: number[];
  error?: string;
  stopReason?: string;
}

/** The result of `Agent.nextRequest`. */
export interface BuiltRequest {
  /**
   * The exact envelope bytes (their SHA-256 is logged): a Buffer over the library's memory when
   * large (given back when the collector releases it, or at `release()`). Throws once released.
   */
  readonly bytes: Buffer;
  /** Gives the bytes' memory back now; a Buffer taken from `bytes` must not be read after it. */
  release(): void;
  /** The same bytes as a string (decoded on first access, then kept). */
  readonly json: string;
  /** The envelope parsed (on first access, then kept). */
  readonly envelope: Envelope;
  readonly info: RequestInfo;
}

/** The outcome of a compaction. */
export interface CompactionOutcome {
  outcome: 'landed' | 'discarded' | 'failed' | 'cancelled';
  span: [number, number];
  seqs: number[];
  request: { digest: string; sharedMessages: number; messageCount: number };
  error?: string;
}

/** What a prefix listener receives. */
export interface PrefixListenerInput {
  rest: Message[];
  instance: number;
  turn: number;
}

/** What a pre-step listener receives. */
export interface PreStepInput {
  prefix: Message[];
  system: string | null;
  tools: Json[];
  turn: number;
  step: number;
}

/** What the summariser receives. */
export interface SummaryInput {
  request: Envelope;
  provider: string;
  model: string;
  maxTokens: number;
  digest: string;
  sharedMessages: number;
  prefixLen: number;
}

/** What the summariser answers (a string is `{text}`). */
export interface SummaryOutput {
  text: string;
  usage?: Usage;
  provider?: string;
  model?: string;
  truncated?: boolean;
}

/** What a host token counter receives. */
export type TokenCountItem =
  | { kind: 'system'; text: string }
  | { kind: 'tools'; tools: Json[] }
  | { kind: 'message'; message: Message };

/** The second argument of every callback. */
export interface CallbackContext {
  /** Aborts when the operation's signal aborts (or the operation failed). */
  signal: AbortSignal;
}

type MaybePromise<T> = T | Promise<T>;

export type PrefixListener = (input: PrefixListenerInput, ctx: CallbackContext) => MaybePromise<Message[]>;
export type PreStepListener = (input: PreStepInput, ctx: CallbackContext) => MaybePromise<void | null>;
export type Summariser = (input: SummaryInput, ctx: CallbackContext) => MaybePromise<SummaryOutput | string>;
export type TokenCounter = (item: TokenCountItem, ctx: CallbackContext) => MaybePromise<number | { tokens: number }>;

/** Options of an operation that may wait. */
export interface OperationOptions {
  /** Trips the operation's cancel token (the operation fails with status CANCELLED). */
  signal?: AbortSignal;
  /**
   * Run the library call on a koffi worker thread even when the agent has no JS callbacks
   * (which it otherwise runs on the main thread: docs/node.md, "Threads").
   */
  worker?: boolean;
}

/** Render options an agent's renderer takes (`setRenderer`): the prefix length is the agent's own. */
export interface AgentRenderOptions {
  promptCacheKey?: boolean | string;
  promptCacheRetention?: string;
  cacheTtl?: '5m' | '1h';
  promptCacheOptions?: PromptCacheOptions;
  promptCacheBreakpoints?: boolean;
  /** Anthropic cache diagnostics: `diagnostics.previous_message_id` from the log. */
  cacheDiagnostics?: boolean;
}

/** OpenAI's `prompt_cache_options` (gpt-5.6 and later; both OpenAI formats). */
export interface PromptCacheOptions {
  mode?: 'implicit' | 'explicit';
  ttl?: string;
}

/** The result of `Agent.nextBody`: the provider body, ready to POST. */
export declare class Body {
  /**
   * The body's bytes: a Buffer over the library's memory when large, given back when the
   * collector releases it or at `release()`. Throws (INVALID_HANDLE) once released.
   */
  readonly body: Buffer;
  /** The body as a string (decoded on first access, then kept). */
  readonly json: string;
  /** The request's description (no JSON round trip). */
  readonly info: RequestInfo & { purpose: 'conversation' | 'compaction' };
  /** Gives the memory back now; a Buffer taken from `body` must not be read after it. */
  release(): void;
  readonly released: boolean;
}

/** One tool call of an assistant message (`tools.js`). */
export declare class ToolCall {
  private constructor();
  /** The call's id: the `callId` of its result (`agent.recordToolResult`). */
  readonly id: string;
  /** The tool's name. */
  readonly name: string;
  /** The arguments as the model wrote them (JSON text; a model may write invalid JSON). */
  readonly argumentsJson: string;
  /**
   * The arguments parsed (on first access; an empty text is `{}`). Throws a SyntaxError naming
   * the call when `argumentsJson` is not JSON.
   */
  readonly arguments: any;
}

/**
 * The tool calls in a message, a response `{message, ...}`, an event, or an array of these
 * (an object, JSON text, or its bytes), in the order the model made them.
 */
export declare function toolCalls(value: unknown): ToolCall[];

/** What `recordBody` and `recordStream` recorded. */
export declare class Recorded {
  private constructor();
  /** Seq of the assistant/message event. */
  readonly seq: number;
  /** How many tool calls the response made. */
  readonly toolCallCount: number;
  /**
   * The response's tool calls, as the log holds them: read from the session on first access
   * (nothing is read when there are none), so read them before the session is closed.
   */
  readonly toolCalls: ToolCall[];
  /**
   * The response's finish reason, normalised (`'pause-turn'`: the turn is not over, build the
   * next request of the same turn); absent when the response gives none. Not logged.
   */
  readonly finishReason?: FinishReason;
}

/** What `recordBody` and `recordStream` recorded (the `Recorded` class). */
export type RecordedResponse = Recorded;

/** Status codes (lls_status). */
export declare const Status: Readonly<{
  OK: 0;
  MALFORMED_JSON: 1;
  INVALID_INPUT: 2;
  OUT_OF_ORDER: 3;
  BUSY: 4;
  CORRUPT_LOG: 5;
  STORAGE: 6;
  CANCELLED: 7;
  DISPOSED: 8;
  LISTENER: 9;
  SUMMARISER: 10;
  RECONSTRUCTION: 11;
  INVALID_POLICY: 12;
  OVERFLOW_BUDGET: 13;
  NOTHING_TO_COMPACT: 14;
  TOKENIZER: 15;
  POISONED: 16;
  INTERNAL: 17;
  LOCKED: 18;
  CONFLICT: 19;
  READ_ONLY: 20;
  NULL_POINTER: 100;
  INVALID_UTF8: 101;
  INVALID_HANDLE: 102;
  PANIC: 103;
  INVALID_ARGUMENT: 104;
  REPLY_STATE: 105;
  OUT_OF_MEMORY: 106;
}>;

/** An error reported by llmsession. */
export declare class LlmSessionError extends Error {
  /** The lls_status code. */
  readonly status: number;
  /** The status's C name, e.g. "LLS_ERR_LOCKED" (another writer holds the session),
   * "LLS_ERR_CONFLICT" (another writer appended first), "LLS_ERR_READ_ONLY". */
  readonly code: string;
  /** The stable kind name ("listener", "out-of-order", ...): the detail's `kind`, else `statusName(status)`. */
  readonly kind: string;
  /** The JSON detail (`kind`, `status`, `message`, and context such as `field`, `seq`, `callback`). */
  readonly detail: { kind: string; status: number; message: string; [key: string]: Json | undefined };
  constructor(status: number, message: string, detail?: object | null, options?: { cause?: unknown });
}

/** Thrown by a callback to fail its reply on purpose (the operation fails with LlmSessionError). */
export declare class CallbackError extends Error {
  constructor(message: string, options?: { cause?: unknown });
}

/** A session: the append-only event log of one conversation. */
export declare class Session {
  private constructor(ptr: unknown);
  static memory(options?: SessionOptions): Session;
  static openFile(path: string, options?: FileOptions): Session;
  /** Opens (or creates) a session in the store a URL names: `file:PATH` or `postgres://...`. */
  static openUrl(url: string, options?: UrlOptions): Session;
  fork(options?: ForkOptions): Session;
  readonly id: string;
  info(): { type: 'session'; format: string; version: number; id: string; createdAt: number; [key: string]: Json };
  loadReport(): {
    cutRecords: number;
    cutAtLine?: number;
    cutReason?: string;
    /** Whether the cut starts at a damaged record (false: only a torn last line). */
    cutDamaged?: boolean;
    /** Where the cut records were kept (a sidecar file `<log>.cut-<ms>`, a quarantine). */
    cutSavedTo?: string;
    repairedEvents: number;
  };
  events(from?: number, to?: number): SessionEvent[];
  history(): Message[];
  header(): { config: CallConfig; system?: string; tools?: Json[]; messagePrefix?: Message[] } | null;
  stats(): { readOnly: boolean; chainHead?: string; [key: string]: number | boolean | string | undefined };
  verify(): { events: number; requests: number; compactions: number };
  /** With `tree: true`: the tree rooted at this session (its children spawned in this process). */
  explain(options: ExplainOptions & { tree: true }): TreeExplanation;
  /** Why each request of the log hit or missed the provider's cache (`docs/caching.md`). */
  explain(options?: ExplainOptions | null): Explanation;
  append(event: NewEvent): number;
  sync(): void;
  /** Reads what another writer appended since; returns the number of new events. */
  refresh(): number;
  /** The whole log as JSONL text, each record exactly as stored. */
  exportJsonl(): string;
  close(): void;
  readonly closed: boolean;
}

/** An agent instance over a session. */
export declare class Agent {
  constructor(session: Session, options: AgentOptions);
  static create(session: Session, options: AgentOptions): Agent;
  readonly session: Session;
  setOptions(options: AgentOptions): void;
  setPolicy(policy: Policy | PolicyTable | null): void;
  setTokenizer(path: string): void;
  clearTokenCounter(): void;
  addPrefixListener(fn: PrefixListener): void;
  addPreStepListener(fn: PreStepListener): void;
  setSummariser(fn: Summariser): void;
  setTokenCounter(fn: TokenCounter): void;
  startTurn(message: string | Message): number;
  nextRequest(options?: OperationOptions): Promise<BuiltRequest>;
  requestInfo(): RequestInfo;
  /** Gives the agent a renderer: `nextBody` then builds provider bodies. */
  setRenderer(renderer: Format | string, options?: AgentRenderOptions | null): void;
  /** Builds the next request and resolves with its provider body (needs `setRenderer`). */
  nextBody(options?: OperationOptions): Promise<Body>;
  /** The envelope of the last request built (the logged bytes). */
  lastEnvelope(): Buffer;
  /**
   * Records the provider's response body for the open step: its raw bytes, or the parsed JSON
   * (a plain object, such as what the `openai` and `@anthropic-ai/sdk` packages return).
   */
  recordBody(body: Buffer | Uint8Array | string | object): Recorded;
  /** Records a streamed response from its accumulator, at the stream's end. */
  recordStream(stream: Stream, options?: { partial?: boolean }): Recorded;
  recordResponse(response: { message: Message; usage?: Usage; finishReason?: string }): number;
  recordToolResult(result: { callId: string; text?: string; content?: Block[]; isError?: boolean }): number;
  inject(message: string | Message): number | null;
  providerError(error: string | { message: string; overflow?: boolean }, options?: OperationOptions): Promise<{ retry: boolean }>;
  endTurn(reason?: 'completed' | 'max-tokens' | 'aborted' | 'error' | 'rejected' | 'disposed' | 'interrupted'): void;
  compact(options?: OperationOptions & { span?: [number, number] }): Promise<CompactionOutcome>;
  /** A native compaction request for the route over the whole history (ABI 2 minor 6). */
  beginNativeCompaction(): NativeRequest;
  /** Records the provider's answer to the native compaction request in flight. */
  recordNativeCompaction(body: string | Buffer | Uint8Array | Json): NativeOutcome;
  /** Reports that the native compaction request in flight failed. */
  failNativeCompaction(why?: string): NativeOutcome;
  measure(options?: OperationOptions): Promise<{ total: number; counter: string; [key: string]: Json }>;
  /** Asks the cache clock what to do now (docs/caching.md, "The cache clock"). Synchronous. */
  cacheClock(options?: ClockOptions): ClockDecision;
  /** The keep-warm request the clock decided, as the provider body; record its answer with `recordBody`. */
  keepaliveBody(): Body;
  /** The compaction the clock decided (`trigger: "idle"`). */
  compactIdle(options?: OperationOptions): Promise<CompactionOutcome>;
  stats(): { readOnly: boolean; chainHead?: string; [key: string]: number | boolean | string | undefined };
  prefix(): Message[] | null;
  dispose(): Promise<void>;
  close(): void;
  readonly closed: boolean;
  /**
   * Spawns a child agent from the open tool call `options.callId` (none: at a turn boundary):
   * its first request extends this agent's last one (tree.js, `docs/caching.md`).
   */
  spawn(directive: string | Message, options?: SpawnOptions): { session: Session; agent: Agent };
  /** Ends the child's turn and records its answer as this agent's result of its call. */
  finishChild(child: Agent, options?: { error?: string } | null): Promise<ChildOutcome>;
  /** An agent that sends what the session's last request carried (a woken child). */
  static wake(session: Session, options?: { checkRequests?: boolean; policy?: Policy | PolicyTable; tokenizer?: string }): Agent;
}

/** Options of `Agent#spawn`. */
export interface SpawnOptions {
  /** The parent's open tool call the child answers; absent: at a turn boundary. */
  callId?: string;
  /** The result text of every open call in the child's history (default `DEFAULT_PLACEHOLDER`). */
  placeholder?: string;
  id?: string;
  durability?: 'every-event' | 'turn-end' | 'never';
  /** Keep the child in this JSONL file (default: beside a JSONL parent, named after it). */
  path?: string;
  /** Keep the child in the store this URL names. */
  url?: string;
  /** The TTL of the child's Anthropic cache breakpoints. */
  cacheTtl?: '5m' | '1h';
  /** At most this many requests. */
  maxTurns?: number;
}

/** What finishing a child gave its parent. */
export interface ChildOutcome {
  child: string;
  callId?: string;
  answer: string;
  isError: boolean;
  /** Tool results this call wrote to the parent's log (0: an earlier call still waits). */
  recorded: number;
}

/** The result text of every open call of the parent in a child's history, unless given. */
export declare const DEFAULT_PLACEHOLDER: string;

/** Sums over some requests of a tree (`explain` with `tree: true`). */
export interface TreeSpend {
  requests: number;
  promptTokens: number;
  cachedTokens: number;
  uncachedTokens: number;
  missTokens: number;
  outputTokens: number;
  cost?: number;
  missCost?: number;
}

/** The explanation of a tree of sessions (`docs/caching.md`, "Explain across a tree"). */
export interface TreeExplanation {
  root: string;
  counter: string;
  nodes: Array<{
    id: string;
    parent?: string;
    kind: 'root' | 'spawn' | 'fork';
    callId?: string;
    depth: number;
    seedLength: number;
    source: string;
    own: TreeSpend;
    spawnFloor?: TreeSpend;
    work?: TreeSpend;
    inheritedTokens: number;
    subtree: TreeSpend;
    answeredAt?: number;
  }>;
  totals: {
    nodes: number;
    all: TreeSpend;
    root: TreeSpend;
    subagents: TreeSpend;
    spawnFloors: TreeSpend;
    work: TreeSpend;
    inheritedTokens: number;
    coldChildren: { uncachedTokens: number; extraUncachedTokens: number; cost?: number; extraCost?: number };
  };
}

/** The decisions of the cache clock. */
export declare const Decision: {
  readonly NONE: 'none';
  readonly COMPACT: 'compact';
  readonly KEEP_WARM: 'keep-warm';
  readonly LET_EXPIRE: 'let-expire';
  readonly TIER: 'tier';
};

/** The options of `Agent.cacheClock` (all optional). */
export interface ClockOptions {
  /** The time to decide for, ms since the epoch (default: now). */
  now?: number;
  /** The host's price table (as for explain): without a price for the model nothing is decided. */
  prices?: { [key: string]: Json };
  /** Overrides of the providers' TTLs (as for explain). */
  cacheRules?: { [key: string]: Json };
  /** The return-time model (default: the session's gaps and the documented prior). */
  returnModel?: { gapsMs?: number[]; weights?: number[]; neverReturns?: number; learn?: boolean; priorWeight?: number };
  /** How long before expiry the clock acts, ms (default 10000, raised to the session's longest keep-warm round trip). */
  marginMs?: number;
  /** How a longer-tier write after a hit is billed. */
  tierBilling?: 'written' | 'prefix';
  compaction?: { enabled?: boolean; minContextTokens?: number; summaryRatio?: number };
  /** Whether an action decision is recorded in the log (default true). */
  record?: boolean;
  /** The most one pause may stake in keep-warm requests, as a share of what the session's requests have cost so far (default 0.05). */
  keepWarmBudget?: number;
  /** Whether a keep-warm request may be sent at a longer tier than the one in force (default true; docs/caching.md, "Keeping warm at a longer tier"). */
  keepWarmTiers?: boolean;
}

/** The cache clock's answer. */
export interface ClockDecision {
  decision: 'none' | 'compact' | 'keep-warm' | 'let-expire' | 'tier';
  tier?: string;
  reason: string;
  at: number;
  warmUntil?: number;
  /** When to ask again (ms since the epoch); absent: nothing to decide before the next request. */
  nextDecisionAt?: number;
  returnProbability?: number;
  options: { option: string; tier?: string; expectedCost: number; expectedPings?: number }[];
  breakEven: { [key: string]: number };
  /** Where the return-time model came from. */
  returns: string;
  state: {
    provider: string;
    model: string;
    lastRequestAt?: number;
    touchedAt?: number;
    tier: string;
    ttlMs?: number;
    figures?: { [key: string]: Json };
    compacted: boolean;
  };
  /** The seq of the clock/decision event that records it. */
  recorded?: number;
}

/** A provider body format. */
export type Format = 'openai' | 'openai-responses' | 'anthropic' | 'gemini' | 'gemini-interactions';
/** Renders an envelope into a provider's JSON body. */
export declare function render(renderer: Format | string, envelope: Envelope | string | Buffer, prefixLen?: number): string;
/** Render options (`docs/render.md`, `docs/caching.md`). */
export interface RenderOptions {
  /** Leading envelope messages that are the session prefix. */
  prefixLen?: number;
  /** OpenAI-compatible `prompt_cache_key`: true (default) the envelope's sessionId, false none, a string that key. */
  promptCacheKey?: boolean | string;
  /** OpenAI-compatible `prompt_cache_retention` ("in_memory", "24h"), sent verbatim. */
  promptCacheRetention?: string;
  /** The `ttl` of the Anthropic cache breakpoints. */
  cacheTtl?: '5m' | '1h';
  /** OpenAI's `prompt_cache_options`; its `ttl` with `promptCacheRetention` is an error. */
  promptCacheOptions?: PromptCacheOptions;
  /** OpenAI: `prompt_cache_breakpoint` marks at the end of the system prompt, the session prefix and the history. */
  promptCacheBreakpoints?: boolean;
  /** Anthropic cache diagnostics: `diagnostics.previous_message_id` from the envelope. */
  cacheDiagnostics?: boolean;
}
/** Renders an envelope with render options. */
export declare function renderWithOptions(renderer: 'openai' | 'anthropic' | string, envelope: Envelope | string | Buffer, options?: RenderOptions | null): string;
/** Where a request parts from the one it is compared with (`explain`). */
export interface Divergence {
  component: 'config' | 'system' | 'tool' | 'prefix' | 'history' | 'instruction';
  field?: string;
  line?: number;
  name?: string;
  change?: string;
  index?: number;
  offset?: number;
  atByte: number;
  event: 'header-change' | 'resume' | 'compaction' | 'inject' | 'edit';
  eventSeq?: number;
  summary: string;
}
/** One request of an explanation. */
export interface ExplainedRequest {
  id: string;
  kind: 'conversation' | 'compaction';
  seq: number;
  turn: number;
  step: number;
  instance: number;
  header?: string;
  compactionsBefore: number;
  messages: number;
  prefixLen: number;
  bytes: number;
  tokens: number;
  rebuilt: boolean;
  comparedWith?: string;
  sharedBytes: number;
  sharedTokens: number;
  sharedMessages: number;
  extends: boolean;
  divergence?: Divergence;
  usage?: Usage;
  promptTokens: number;
  cachedTokens: number;
  expectedCachedTokens: number;
  uncachedTokens: number;
  spendSource: 'provider' | 'estimate';
  cause: Cause;
  /** The uncached tokens by cause; they sum to `uncachedTokens`. */
  causes: { cause: Cause; tokens: number; cost?: number }[];
  /** When the request was built (Unix ms), and the gap since the one it is compared with. */
  time: number;
  gapMs?: number;
  /** The provider's cache TTL (null: none) and minimum cacheable size in force. */
  cacheRule: { ttlMs: number | null; minTokens: number };
  cacheWriteTokens: number;
  rewriteFactor?: number;
  /** With a price table. */
  cost?: Cost;
  /** The provider's cache diagnosis beside the library's (null `agrees`: not comparable). */
  diagnostics?: { provider: string; ours: string; agrees: boolean | null };
}
/** What an uncached prompt token is charged to (`docs/caching.md`, "Cache economics"). */
export type Cause =
  | 'growth' | 'header-change' | 'resume' | 'compaction' | 'retry-after-overflow' | 'inject' | 'edit'
  | 'context-edit' | 'expiry' | 'below-minimum' | 'unexplained';
/** What a request cost, in the price table's unit. */
export interface Cost {
  total: number;
  uncached: number;
  cached: number;
  output: number;
  noCache: number;
}
/** The explanation of a log (`Session#explain`, `explainFile`). */
export interface Explanation {
  session: string;
  counter: 'estimate' | 'tokenizer' | 'host' | string;
  requests: ExplainedRequest[];
  totals: {
    conversationRequests: number;
    compactionRequests: number;
    notRebuilt: number;
    promptTokens: number;
    cachedTokens: number;
    expectedCachedTokens: number;
    spend: Record<string, number>;
    cacheWriteTokens: number;
    rewriteFactor: number;
    cost?: { total: number; noCache: number; byCause: Record<string, number>; unpriced: number };
    diagnosticsCompared: number;
    diagnosticsDisagreements: number;
  };
}
/** A price per million tokens, by provider or provider/model (`docs/caching.md`). */
export interface Price {
  input: number;
  cachedInput: number;
  cacheWrite?: number | Record<string, number>;
  output: number;
}
/** Options of `explain`. */
export interface ExplainOptions {
  /** A HuggingFace tokenizer.json to count tokens exactly (default: the built-in estimate). */
  tokenizer?: string;
  /** A price table: the report then has costs. */
  prices?: Record<string, Price>;
  /** Overrides of the providers' cache TTLs and minimum cacheable sizes. */
  cacheRules?: Record<string, { ttlSeconds?: number | null; minTokens?: number }>;
  /** Explain the tree rooted at the session instead (see `TreeExplanation`). */
  tree?: boolean;
}
/** With `tree: true`: the tree rooted at the log (`path` may be a store URL). */
export declare function explainFile(path: string, options: ExplainOptions & { tree: true }): TreeExplanation;
/** Explains a stored JSONL log without opening it. */
export declare function explainFile(path: string, options?: ExplainOptions | null): Explanation;
/** A recorded answer (`Replay#answer`). */
export interface ReplayAnswer {
  purpose: 'conversation' | 'compaction';
  id: string;
  turn?: number;
  step?: number;
  outcome: 'response' | 'error' | 'cancelled' | 'summary' | 'failed';
  /** outcome "response": what `agent.recordResponse` takes, as it is. */
  response?: { message: Message; usage?: Usage };
  error?: string;
  overflow?: boolean;
  /** outcome "summary": the summariser's reply, as it is. */
  summary?: { text: string; usage?: Usage; provider?: string; model?: string };
}
/** A recorded session that answers a host's requests (offline tests of an agent loop). */
export declare class Replay {
  static openFile(path: string): Replay;
  static fromSession(session: Session): Replay;
  answer(envelope: Envelope | string | Buffer): ReplayAnswer;
  info(): { sessionId: string; requests: number; answered: number; next?: string };
  close(): void;
}
/**
 * A finish reason, normalised across providers (docs/render.md, "Finish reasons", says what a
 * host does for each); a reason the library does not know comes in the provider's spelling.
 */
export type FinishReason =
  | 'stop'
  | 'tool-calls'
  | 'max-tokens'
  | 'pause-turn'
  | 'refusal'
  | 'context-overflow'
  | 'content-filter'
  | 'incomplete'
  | (string & {});
/** A provider response parsed by `parseResponse`; `agent.recordResponse` takes it as it is. */
export interface ParsedResponse {
  message: Message;
  usage?: Usage;
  finishReason?: FinishReason;
}
/** Parses a provider's response body. */
export declare function parseResponse(renderer: Format | string, body: string | Buffer | Json): ParsedResponse;
/**
 * A piece of a streamed response, for display; `index` counts the blocks of its type. A union
 * discriminated on `type`: text and reasoning deltas carry `text`, tool-call deltas `arguments`.
 */
export type Delta = TextDelta | ToolCallDelta;
/** A fragment of a text or reasoning block. */
export interface TextDelta {
  type: 'text' | 'reasoning';
  index: number;
  text: string;
}
/** A tool call as it streams: `id` (when the provider streams one) and `name` on its first delta, then fragments of `arguments`. */
export interface ToolCallDelta {
  type: 'tool-call';
  index: number;
  id?: string;
  name?: string;
  arguments: string;
}
/** Chunks a stream can be fed from: `fetch(...).body`, a Node Readable, an async generator. */
export type ByteSource = ReadableStream<Uint8Array> | AsyncIterable<Uint8Array | Buffer | string>;
/** One streamed provider response: feed it the raw event-stream bytes; finish() gives what parseResponse gives for the non-streamed body. */
export declare class Stream {
  constructor(format: Format | string);
  readonly format: string;
  feed(chunk: Buffer | Uint8Array | string): void;
  nextDelta(): Delta | null;
  takeDeltas(): Delta[];
  /** The response; throws for a failed or cut stream unless `partial` (then finishReason is "incomplete"). */
  finish(options?: { partial?: boolean }): ParsedResponse;
  /** The provider body rebuilt so far, in the non-streamed shape. */
  body(): Json;
  consume(source: ByteSource, onDelta?: (delta: Delta) => void): Promise<ParsedResponse>;
  close(): void;
  readonly closed: boolean;
}
/** Reads a whole streamed response from `source`; the stream is freed either way. */
export declare function readStream(format: Format | string, source: ByteSource, onDelta?: (delta: Delta) => void): Promise<{ response: ParsedResponse; body: Json }>;
/** Maps a provider's usage object ("openai", "llama.cpp", "deepseek", "openai-responses", "anthropic", "gemini") into a Usage. */
export declare function usageFromProvider(provider: string, usage: Json): Usage;
/** Whether a provider error (HTTP status and body) says the prompt did not fit the context window. */
export declare function isContextOverflow(status: number, body: string | Buffer): boolean;
/** Verifies a stored JSONL log without opening it. */
export declare function verifyFile(path: string): { events: number; requests: number; compactions: number };

/** The sessions of the store a URL names, ordered by id. */
export declare function listSessions(url: string, options?: { after?: string; limit?: number; parent?: string }): StoredSession[];
/** Calls `fn` through the library's callback machinery (a trampoline self-test). */
export declare function invokeCallback(fn: (input: any, ctx: CallbackContext) => unknown, input: Json, options?: OperationOptions): Promise<Json>;
/** Live library handles (for leak checks). */
export declare function liveHandleCount(): number;
/** JS callbacks registered with the library and not yet released. */
export declare function registeredCallbackCount(): number;
/** Number of Buffers over library memory not yet given back (by the collector or `release()`). */
export declare function lentBufferCount(): number;
/** Number of library strings handed out and not yet freed (a leak check). */
export declare function liveStringCount(): number;
/** The loaded library's ABI minor version (compatible additions to ABI_VERSION; at least ABI_MINOR). */
export declare function abiMinor(): number;
/**
 * The stable name of a status, from the library (`lls_status_name`) and as error details carry it
 * in `kind`: `statusName(Status.CORRUPT_LOG)` is `"corrupt-log"`; `"unknown"` for a value the
 * library does not define. Throws a TypeError for a number that is not a 32-bit integer.
 */
export declare function statusName(status: number): string;

/** The C ABI version this binding was written against. */
export declare const ABI_VERSION: number;
/** The oldest ABI minor version of ABI_VERSION this binding loads (2: `lls_status_name`). */
export declare const ABI_MINOR: number;
export declare const version: string;
export declare const abiVersion: number;
export declare const libraryPath: string;

// ---------------------------------------------------------------------------------------------
// The observer hook (docs/observe.md)

/** How much an observation matters. */
export type ObservationLevel = 'debug' | 'info' | 'warn' | 'error';

/** The kinds the library reports (docs/observe.md lists each one's fields). */
export type ObservationKind =
  | 'log-cut'
  | 'turn-repaired'
  | 'log-legacy-format'
  | 'store-locked'
  | 'store-conflict'
  | 'store-undo'
  | 'compaction-triggered'
  | 'compaction-skipped'
  | 'summariser-failed'
  | 'summary-rejected'
  | 'compaction-failed'
  | 'over-threshold'
  | 'overflow-retry'
  | 'turn-disposed'
  | 'turn-dispose-failed';

/** One thing the library did on its own: `{kind, level, message, sessionId?, ...fields}`. */
export interface Observation {
  /** Stable kebab-case name (a later library may add kinds: treat an unknown one as its level says). */
  kind: ObservationKind | string;
  level: ObservationLevel;
  /** One sentence for a human. */
  message: string;
  /** The session it concerns, when known. */
  sessionId?: string;
  /** The kind's own fields (`records`, `savedTo`, `tokens`, `threshold`, `error`, ...). */
  [field: string]: Json | undefined;
}

/** Options of `setObserver`. */
export interface ObserverOptions {
  /** The minimum level delivered (default 'info'). */
  level?: ObservationLevel;
}

/**
 * Sets the process-wide observer (`null` clears it; one observer at a time, shared with
 * `observer`). Observations are delivered asynchronously (from `setImmediate`), in order, soon
 * after the library call that caused them, so `fn` may call into the library.
 */
export declare function setObserver(fn: ((o: Observation) => void) | null, options?: ObserverOptions): void;

/** The observer as an EventEmitter (see `observer`). */
export interface ObserverEmitter extends NodeJS.EventEmitter {
  /** The minimum level observed (default 'info'). */
  level: ObservationLevel;
  on(event: 'observation' | ObservationLevel, listener: (o: Observation) => void): this;
  once(event: 'observation' | ObservationLevel, listener: (o: Observation) => void): this;
  off(event: 'observation' | ObservationLevel, listener: (o: Observation) => void): this;
}

/**
 * The observer as an EventEmitter: the first 'observation' (or level) listener sets the
 * process-wide observer at `observer.level`; removing the last one clears it.
 */
export declare const observer: ObserverEmitter;
