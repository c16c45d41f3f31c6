// A request sent by hand on a raw socket: its line and headers, then only part of its body, so that a test sees what
// the server answers before the rest (docs/security.md, "Request bodies").
import { connect, type Socket } from 'node:net';

export interface Answer { status: number; headers: Record<string, string>; body: string; json: any } // eslint-disable-line @typescript-eslint/no-explicit-any

/**
 * Sends the request line and headers, then `sent` bytes of the body (not all of it, unless told), and resolves with
 * the answer as soon as a whole one has arrived, or null if none came within `waitMs`. `closed` resolves once the
 * server has ended the connection.
 */
export function partial(url: string, head: string, sent: number | Buffer, waitMs = 5000): { answer: Promise<Answer | null>; closed: Promise<void>; socket: Socket } {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  socket.on('error', () => {}); // the server may end the connection while the rest of the body is on its way
  let text = '';
  socket.setEncoding('latin1');
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  const answer = new Promise<Answer | null>((resolve) => {
    const timer = setTimeout(() => resolve(null), waitMs);
    const parse = () => {
      const end = text.indexOf('\r\n\r\n');
      if (end < 0) return;
      const lines = text.slice(0, end).split('\r\n');
      const headers: Record<string, string> = {};
      for (const l of lines.slice(1)) headers[l.slice(0, l.indexOf(':')).toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
      const length = Number(headers['content-length'] ?? 0);
      if (text.length < end + 4 + length) return;
      clearTimeout(timer);
      const body = text.slice(end + 4, end + 4 + length);
      let json;
      try {
        json = JSON.parse(body);
      } catch {
        json = undefined;
      }
      resolve({ status: Number(lines[0]!.split(' ')[1]), headers, body, json });
    };
    socket.on('data', (d: string) => {
      text += d;
      parse();
    });
  });
  socket.write(head);
  // A Buffer is written as it is (one shared buffer for many connections: this process is the server's too).
  if (Buffer.isBuffer(sent)) socket.write(sent);
  else if (sent > 0) socket.write(Buffer.alloc(sent, 0x20));
  return { answer, closed, socket };
}
