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

function tell(line: string): void {
  if (process.platform === 'win32') return;
  if (reaper === null) {
    try {
      reaper = spawn('/bin/sh', ['-c', SCRIPT], { stdio: ['pipe', 'ignore', 'ignore'], detached: false });
    } catch {
      return; // no shell: executors are only stopped by their parent, as before
    }
    reaper.on('error', () => {});
    reaper.stdin!.on('error', () => {}); // the shell gone (killed with the group): nothing to tell
    reaper.unref();
    (reaper.stdin as unknown as { unref?: () => void }).unref?.();
  }
  reaper.stdin!.write(`${line}\n`);
}

/** An executor started: killed if this process dies first. */
export function watchExecutor(pid: number | undefined): void {
  if (pid !== undefined) tell(`+${pid}`);
}

/** An executor exited: its pid may be another process's soon. */
export function forgetExecutor(pid: number | undefined): void {
  if (pid !== undefined && reaper !== null) tell(`-${pid}`);
}
