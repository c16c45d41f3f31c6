// Executors outliving their parent: a child blocked in a runaway SQLite step cannot see its parent die (its event
// loop is stuck), so after a kill -9 of the server it would spin for ever. One small shell per server process holds
// the list of live executor pids; when the server dies its pipe ends, and the shell kills whatever is left.
import { spawn, type ChildProcess } from 'node:child_process';

// Reads "+pid" / "-pid" lines; at the end of its input (the server exited, however) kills the pids still listed.
const SCRIPT = `trap '' INT TERM HUP
pids=" "
while read -r line; do
  case "$line" in
    +*) pids="$pids\${line#+} " ;;
    -*) pids=$(printf '%s' "$pids" | sed "s/ \${line#-} / /") ;;
  esac
done
[ -n "\${pids# }" ] && kill -9 $pids 2>/dev/null
exit 0`;

let reaper: ChildProcess | null = null;
/** The executors alive now: told again to a new shell if the one before is gone (killed by someone). */
const live = new Set<number>();

/** The shell, started (again) when there is none: null where none can be started (no /bin/sh). */
function shell(): ChildProcess | null {
  if (reaper !== null && reaper.exitCode === null && reaper.signalCode === null && reaper.stdin?.writable) return reaper;
  if (process.platform === 'win32') return null;
  try {
    reaper = spawn('/bin/sh', ['-c', SCRIPT], { stdio: ['pipe', 'ignore', 'ignore'] });
  } catch {
    return null; // executors are then stopped by their parent only, as before
  }
  reaper.on('error', () => {});
  // Out of file descriptors (EMFILE) Node sets up no pipe: no shell this time, the next executor started tries again.
  if (!reaper.stdin) return null;
  reaper.stdin.on('error', () => {}); // the shell gone meanwhile: 'exit' starts another
  // Killed by someone while executors live: another takes their list (it ends only when this process does).
  reaper.once('exit', () => {
    if (live.size > 0) shell();
  });
  reaper.unref();
  (reaper.stdin as unknown as { unref?: () => void }).unref?.();
  if (live.size > 0) reaper.stdin.write([...live].map((pid) => `+${pid}\n`).join(''));
  return reaper;
}

/** An executor started: killed if this process dies first. */
export function watchExecutor(pid: number | undefined): void {
  if (pid === undefined) return;
  live.add(pid);
  shell()?.stdin!.write(`+${pid}\n`);
}

/** An executor exited: its pid may be another process's soon. */
export function forgetExecutor(pid: number | undefined): void {
  if (pid === undefined || !live.delete(pid)) return;
  if (reaper !== null && reaper.stdin?.writable) reaper.stdin.write(`-${pid}\n`);
}
