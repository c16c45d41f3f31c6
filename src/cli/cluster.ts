// `scopebase cluster move org/repo/db --to node`: a live move of one database (docs/scaling.md), with its progress.
import type { Command } from 'commander';
import { loadConfig } from '../shared/config.ts';
import type { ApiError } from '../shared/errors.ts';
import { checkDatabase, checkOrg, checkRepo } from '../shared/names.ts';
import { moveDatabase, MoveError } from '../cluster/move.ts';
import { EtcdError } from '../cluster/etcd.ts';
import { CliError, EXIT, usageError } from './output.ts';

const DETAILS = `Reads CLUSTER_ETCD. The database's primary makes the target node its follower, copies the
database to it, stops taking writes for a moment (they get 503 with Retry-After), sends the last ones and
hands over in one etcd transaction; the old primary becomes the follower. Nothing acknowledged is lost.

Example:
  CLUSTER_ETCD=http://10.0.0.9:2379 scopebase cluster move acme/web/main --to n2
`;

export function addClusterCommands(program: Command): void {
  const cluster = program.command('cluster').description('work with a cluster of `serve db` nodes (CLUSTER_ETCD)');
  cluster.command('move')
    .description('move one database, live, to another node: it becomes the primary there')
    .argument('<database>', 'org/repo/database')
    .requiredOption('--to <node>', 'the CLUSTER_NODE_ID of the node to move it to')
    .addHelpText('after', `\n${DETAILS}`)
    .action(async (target: string, opts: { to: string }) => {
      const parts = target.split('/');
      if (parts.length !== 3) throw usageError(`the database is org/repo/database, got ${JSON.stringify(target.slice(0, 80))}`);
      let scope;
      try {
        scope = { org: checkOrg(parts[0]!), repo: checkRepo(parts[1]!), database: checkDatabase(parts[2]!) };
      } catch (e) {
        throw usageError((e as ApiError).message);
      }
      const config = loadConfig();
      if (config.cluster === null) throw new CliError(EXIT.config, 'CLUSTER_ETCD is not set: set it to the etcd endpoints of the cluster, e.g. CLUSTER_ETCD=http://10.0.0.9:2379 scopebase cluster move …');
      try {
        await moveDatabase(config.cluster.etcd, scope, opts.to, (line) => process.stderr.write(`${line}\n`));
      } catch (e) {
        if (e instanceof MoveError) throw new CliError(EXIT.refused, e.message);
        if (e instanceof EtcdError) throw new CliError(EXIT.unreachable, e.message);
        throw e;
      }
    });
}
