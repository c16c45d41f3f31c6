// In-memory storage for the development identity provider (its state is disposable: a restart signs everyone out there).

interface Entry { payload: Record<string, unknown>; expiresAt: number }

const stores = new Map<string, Map<string, Entry>>();

export class MemoryAdapter {
  private readonly store: Map<string, Entry>;

  constructor(name: string) {
    let s = stores.get(name);
    if (!s) stores.set(name, (s = new Map()));
    this.store = s;
  }

  private live(id: string): Entry | undefined {
    const e = this.store.get(id);
    if (e && e.expiresAt <= Date.now()) {
      this.store.delete(id);
      return undefined;
    }
    return e;
  }

  async upsert(id: string, payload: Record<string, unknown>, expiresIn: number): Promise<void> {
    this.store.set(id, { payload, expiresAt: Date.now() + (expiresIn || 3600) * 1000 });
  }

  async find(id: string): Promise<Record<string, unknown> | undefined> {
    return this.live(id)?.payload;
  }

  async findByUid(uid: string): Promise<Record<string, unknown> | undefined> {
    for (const [id, e] of this.store) if (e.payload.uid === uid) return this.find(id);
    return undefined;
  }

  async findByUserCode(code: string): Promise<Record<string, unknown> | undefined> {
    for (const [id, e] of this.store) if (e.payload.userCode === code) return this.find(id);
    return undefined;
  }

  async consume(id: string): Promise<void> {
    const e = this.live(id);
    if (e) e.payload.consumed = Math.floor(Date.now() / 1000);
  }

  async destroy(id: string): Promise<void> {
    this.store.delete(id);
  }

  async revokeByGrantId(grantId: string): Promise<void> {
    for (const [id, e] of this.store) if (e.payload.grantId === grantId) this.store.delete(id);
  }
}
