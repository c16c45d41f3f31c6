// Every answer read from a sign-in provider (discovery, JWKS, token, userinfo, GitHub's API) is read to a bound: a
// broken or compromised provider answering 50 MB added ~350 MB to the server's RSS (attack round 7).
import type * as oidc from 'openid-client';

/** Far above any real answer (discovery ~2-5 KB, a JWKS or a token answer a few KB), far below what hurts the server. */
export const PROVIDER_ANSWER_MAX_BYTES = 1024 * 1024;

/** A provider's answer past PROVIDER_ANSWER_MAX_BYTES: the read stopped there and the connection was closed. */
export class AnswerTooLarge extends Error {
  constructor() {
    super(`the sign-in provider's answer is over ${PROVIDER_ANSWER_MAX_BYTES} bytes`);
    this.name = 'AnswerTooLarge';
  }
}

/**
 * openid-client's customFetch: the whole answer is read here, decoded bytes counted (a gzip bomb counts at its
 * decoded size), and handed on as a buffered Response; past the bound the body is cancelled, which ends the
 * connection, and AnswerTooLarge is thrown (errors.ts makes it 503 `unavailable`). The timeout's signal still applies.
 */
export const boundedFetch: oidc.CustomFetch = async (url, options) => {
  const res = await fetch(url, options as RequestInit);
  if (res.body === null) return res;
  if (Number(res.headers.get('content-length') ?? 0) > PROVIDER_ANSWER_MAX_BYTES) {
    await res.body.cancel().catch(() => {});
    throw new AnswerTooLarge();
  }
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > PROVIDER_ANSWER_MAX_BYTES) {
      await reader.cancel().catch(() => {});
      throw new AnswerTooLarge();
    }
    chunks.push(value);
  }
  return new Response(Buffer.concat(chunks), { status: res.status, statusText: res.statusText, headers: res.headers });
};
