// Where databases live: DATA_DIR/db/{org}/{repo}/{database}.sqlite. Names are checked (SPEC 2) before a path is built.
import { existsSync, readdirSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Scope } from './contract.ts';

const SUFFIX = '.sqlite';

export class Layout {
  readonly root: string;

  constructor(root: string) {
    this.root = root;
  }

  repoDir(org: string, repo: string): string {
    return join(this.root, org, repo);
  }

  path(scope: Scope): string {
    return join(this.root, scope.org, scope.repo, scope.database + SUFFIX);
  }

  exists(scope: Scope): boolean {
    return existsSync(this.path(scope));
  }

  /** The repo's databases, sorted by name. */
  databases(org: string, repo: string): string[] {
    let names: string[];
    try {
      names = readdirSync(this.repoDir(org, repo));
    } catch {
      return [];
    }
    return names.filter((n) => n.endsWith(SUFFIX)).map((n) => n.slice(0, -SUFFIX.length)).sort();
  }

  async *all(): AsyncIterable<Scope> {
    for (const org of await readdir(this.root).catch(() => [] as string[])) {
      for (const repo of await readdir(join(this.root, org)).catch(() => [] as string[])) {
        for (const file of await readdir(join(this.root, org, repo)).catch(() => [] as string[])) {
          if (file.endsWith(SUFFIX)) yield { org, repo, database: file.slice(0, -SUFFIX.length) };
        }
      }
    }
  }
}
