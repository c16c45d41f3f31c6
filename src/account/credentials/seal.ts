// SPEC 7.1 sealing: AES-256-GCM, a fresh 12-byte nonce per write, the record's identity as associated data.
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';

/** Who a credential belongs to. Every part is bound into the associated data. */
export interface Identity {
  org: string;
  repo: string;
  user: string;
  plugin: string;
  name: string;
}

export interface Sealed {
  keyId: string;
  nonce: Buffer;
  /** The GCM ciphertext followed by its 16-byte authentication tag. */
  ciphertext: Buffer;
}

export type SealFailure = 'unknown_key' | 'malformed' | 'auth_failed';

/** Opening failed. The message never contains key material or plaintext. */
export class SealError extends Error {
  readonly reason: SealFailure;
  constructor(reason: SealFailure, message: string) {
    super(message);
    this.name = 'SealError';
    this.reason = reason;
  }
}

const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const AAD_VERSION = 'scopebase.credential.v1';

/** A key's public identifier: the first 8 bytes of SHA-256 of the key, as hex. */
export function keyId(key: Buffer): string {
  return createHash('sha256').update(key).digest().subarray(0, 8).toString('hex');
}

/** The associated data: a JSON array, so no two identities encode alike (no separator games). */
export function associatedData(id: Identity): Buffer {
  return Buffer.from(JSON.stringify([AAD_VERSION, id.org, id.repo, id.user, id.plugin, id.name]), 'utf8');
}

export class Sealer {
  readonly currentKeyId: string;
  private readonly keys = new Map<string, Buffer>();

  /** keys[0] is current; the rest can still open older records. */
  constructor(keys: readonly Buffer[]) {
    if (keys.length === 0) throw new Error('at least one encryption key is required');
    for (const key of keys) {
      if (key.length !== 32) throw new Error('encryption keys must be 32 bytes');
      const id = keyId(key);
      if (!this.keys.has(id)) this.keys.set(id, key);
    }
    this.currentKeyId = keyId(keys[0]!);
  }

  has(id: string): boolean {
    return this.keys.has(id);
  }

  get keyIds(): string[] {
    return [...this.keys.keys()];
  }

  seal(id: Identity, plaintext: Buffer): Sealed {
    const key = this.keys.get(this.currentKeyId)!;
    const nonce = randomBytes(NONCE_BYTES);
    const cipher = createCipheriv('aes-256-gcm', key, nonce, { authTagLength: TAG_BYTES });
    cipher.setAAD(associatedData(id));
    const body = Buffer.concat([cipher.update(plaintext), cipher.final()]);
    return { keyId: this.currentKeyId, nonce, ciphertext: Buffer.concat([body, cipher.getAuthTag()]) };
  }

  open(id: Identity, sealed: Sealed): Buffer {
    if (typeof sealed.keyId !== 'string') throw new SealError('malformed', 'the sealed record has no key id');
    const key = this.keys.get(sealed.keyId);
    if (!key) throw new SealError('unknown_key', `the record is sealed under key id ${JSON.stringify(sealed.keyId.slice(0, 32))}, which is not configured`);
    if (!((sealed.nonce as unknown) instanceof Uint8Array)) throw new SealError('malformed', 'the sealed record has no nonce');
    if (sealed.nonce.length !== NONCE_BYTES) throw new SealError('malformed', `the sealed record's nonce is ${sealed.nonce.length} bytes, not ${NONCE_BYTES}`);
    if (!((sealed.ciphertext as unknown) instanceof Uint8Array) || sealed.ciphertext.length < TAG_BYTES) {
      throw new SealError('malformed', 'the sealed record is truncated (shorter than its authentication tag)');
    }
    const ct = Buffer.from(sealed.ciphertext);
    const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(sealed.nonce), { authTagLength: TAG_BYTES });
    decipher.setAAD(associatedData(id));
    decipher.setAuthTag(ct.subarray(ct.length - TAG_BYTES));
    try {
      return Buffer.concat([decipher.update(ct.subarray(0, ct.length - TAG_BYTES)), decipher.final()]);
    } catch {
      throw new SealError('auth_failed', 'the sealed record failed authentication: it was altered, or it belongs to another credential');
    }
  }
}
