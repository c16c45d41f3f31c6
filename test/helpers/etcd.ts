// A real etcd (Debian's etcd-server) for cluster tests: its own data dir, free loopback ports, stopped by the test.
import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { tempDir } from './product.ts';
import { freePort } from './ports.ts';

export interface EtcdProcess {
  url: string;
  child: ChildProcess;
  stop(): Promise<void>;
  /** SIGSTOP / SIGCONT: etcd unreachable without losing its data. */
  pause(): void;
  resume(): void;
}

/** etcd's own count of the calls it started (its /metrics; the JSON gateway's calls included): what the product cost it. */
export async function etcdCalls(url: string): Promise<{ txn: number; range: number }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const started = (method: string) => Number(new RegExp(`^grpc_server_started_total\\{grpc_method="${method}",[^}]*\\} (\\d+)`, 'm').exec(text)?.[1] ?? 0);
  return { txn: started('Txn'), range: started('Range') };
}

/** A port found free may be taken before etcd binds it (other suites run beside these): a few tries with new ports. */
export async function startEtcd(): Promise<EtcdProcess> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startEtcdOnce();
    } catch (e) {
      if (attempt === 3 || !/^etcd exited/.test((e as Error).message)) throw e;
    }
  }
}

async function startEtcdOnce(): Promise<EtcdProcess> {
  const dir = tempDir('scopebase-etcd-');
  const [client, peer] = [await freePort(), await freePort()];
  const url = `http://127.0.0.1:${client}`;
  const child = spawn('etcd', [
    '--name', 'test', '--data-dir', dir,
    '--listen-client-urls', url, '--advertise-client-urls', url,
    '--listen-peer-urls', `http://127.0.0.1:${peer}`, '--initial-advertise-peer-urls', `http://127.0.0.1:${peer}`,
    '--initial-cluster', `test=http://127.0.0.1:${peer}`, '--logger', 'zap', '--log-outputs', 'stderr', '--log-level', 'error',
  ], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (d) => (err += d));
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (child.exitCode !== null) {
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`etcd exited with ${child.exitCode}: ${err}`);
    }
    try {
      const res = await fetch(`${url}/health`);
      if (res.ok && ((await res.json()) as { health?: string }).health === 'true') break;
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) throw new Error(`etcd did not become healthy in 15 s: ${err}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url, child,
    pause: () => child.kill('SIGSTOP'),
    resume: () => child.kill('SIGCONT'),
    async stop() {
      if (child.exitCode === null) {
        child.kill('SIGCONT');
        child.kill('SIGKILL');
        await new Promise((r) => child.once('exit', r));
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
