// The slice of oidc-provider (shipped without types) that the development identity provider uses.
declare module 'oidc-provider' {
  import type { IncomingMessage, ServerResponse } from 'node:http';

  export interface Interaction {
    uid: string;
    prompt: { name: string; reasons: string[]; details: Record<string, unknown> };
    params: Record<string, unknown>;
    session?: { accountId?: string };
  }
  export interface GrantInstance { addOIDCScope(scope: string): void; save(): Promise<string> }
  export interface Ctx { oidc: { client: { clientId: string }; session: { accountId?: string; grantIdFor(clientId: string): string | undefined }; result?: { consent?: { grantId?: string } } } }

  /** The Koa context a page hook (renderError, logoutSource, ...) writes its page to. */
  export interface PageCtx { type: string; body: unknown; set(fields: Record<string, string>): void }
  /** What renderError is given to show: the OAuth error, its description, and the request's state and issuer. */
  export interface ErrorOut { error: string; error_description?: string; state?: string; iss?: string }

  export class Provider {
    constructor(issuer: string, configuration: Record<string, unknown>);
    callback(): (req: IncomingMessage, res: ServerResponse) => void;
    interactionDetails(req: IncomingMessage, res: ServerResponse): Promise<Interaction>;
    interactionFinished(req: IncomingMessage, res: ServerResponse, result: Record<string, unknown>, opts?: { mergeWithLastSubmission?: boolean }): Promise<void>;
    Grant: { new (props: { accountId: string; clientId: string }): GrantInstance; find(id: string): Promise<GrantInstance | undefined> };
    Client: { prototype: { redirectUriAllowed(uri: string): boolean } };
    on(event: string, listener: (...args: unknown[]) => void): this;
  }
  export default Provider;
}
