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
