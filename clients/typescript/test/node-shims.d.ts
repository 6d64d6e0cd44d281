/**
 * The few Node.js built-ins the tests use, declared here so that the
 * package's only devDependency stays `typescript` (no `@types/node`).
 * These are not part of the published package.
 */

declare module "node:test" {
  /** The context a test function receives. */
  export interface TestContext {
    /** Runs `fn` once the test has finished. */
    after(fn: () => unknown): void;
  }
  /** Declares a test. */
  export function test(name: string, fn: (t: TestContext) => unknown): Promise<void>;
  export default test;
}

declare module "node:assert/strict" {
  /** Node's strict assertion functions (the ones the tests use). */
  interface Assert {
    (value: unknown, message?: string): asserts value;
    ok(value: unknown, message?: string): asserts value;
    equal<T>(actual: unknown, expected: T, message?: string): asserts actual is T;
    notEqual(actual: unknown, expected: unknown, message?: string): void;
    deepEqual<T>(actual: unknown, expected: T, message?: string): asserts actual is T;
    match(value: string, regExp: RegExp, message?: string): void;
    doesNotMatch(value: string, regExp: RegExp, message?: string): void;
    rejects(block: Promise<unknown> | (() => Promise<unknown>), error?: unknown, message?: string): Promise<void>;
    throws(block: () => unknown, error?: unknown, message?: string): void;
    fail(message?: string): never;
  }
  const assert: Assert;
  export default assert;
}

declare module "node:http" {
  /** Request headers, lower-cased. */
  export interface IncomingHttpHeaders {
    [name: string]: string | string[] | undefined;
  }
  /** A request a server received. */
  export interface IncomingMessage extends AsyncIterable<Uint8Array> {
    method?: string;
    url?: string;
    headers: IncomingHttpHeaders;
  }
  /** The answer a server writes. */
  export interface ServerResponse {
    statusCode: number;
    setHeader(name: string, value: string | number): this;
    writeHead(statusCode: number, headers?: Record<string, string | number>): this;
    end(chunk?: string): this;
  }
  /** A bound address. */
  export interface AddressInfo {
    address: string;
    family: string;
    port: number;
  }
  /** An HTTP server. */
  export interface Server {
    listen(port: number, host: string, callback: () => void): this;
    address(): AddressInfo | string | null;
    close(callback?: (err?: Error) => void): this;
    closeAllConnections(): void;
  }
  export function createServer(handler: (req: IncomingMessage, res: ServerResponse) => void): Server;
}
