// A FIFO counting semaphore: bounds concurrent deliveries per mirror without starving any waiting database.

export class Limiter {
  private active = 0;
  private readonly waiting: (() => void)[] = [];
  private readonly max: number;

  constructor(max: number) {
    this.max = max;
  }

  async acquire(): Promise<() => void> {
    if (this.active >= this.max) await new Promise<void>((resolve) => this.waiting.push(resolve));
    else this.active++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiting.shift();
      // The slot passes straight to the next waiter, so `active` only drops when no one waits.
      if (next) next();
      else this.active--;
    };
  }

  /** Shutdown: wakes every waiter so no one hangs; they see the worker closed and release at once. */
  close(): void {
    for (const wake of this.waiting.splice(0)) {
      this.active++;
      wake();
    }
  }

  get queued(): number {
    return this.waiting.length;
  }
}

/**
 * A `Limiter` per key inside one overall: a key waits at its own limit first, so it never holds more than `perKey`
 * of the overall slots however many of its callers wait (a tenant whose work is slow delays itself, not the others).
 */
export class KeyedLimiter {
  private readonly overall: Limiter;
  private readonly perKey: number;
  private readonly keys = new Map<string, { limiter: Limiter; users: number }>();

  constructor(overall: number, perKey: number) {
    this.overall = new Limiter(overall);
    this.perKey = perKey;
  }

  async acquire(key: string): Promise<() => void> {
    let entry = this.keys.get(key);
    if (!entry) this.keys.set(key, (entry = { limiter: new Limiter(this.perKey), users: 0 }));
    entry.users++;
    const own = await entry.limiter.acquire();
    const slot = await this.overall.acquire();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      slot();
      own();
      if (--entry.users === 0) this.keys.delete(key); // idle keys are forgotten
    };
  }

  close(): void {
    for (const { limiter } of this.keys.values()) limiter.close();
    this.overall.close();
  }
}
