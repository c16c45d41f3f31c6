// Headless Debian Chromium for the browser tests (playwright-core drives it; no browser download).
import { chromium, type Browser } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';

/** No sandbox (CI runs as root), no GPU, QUIC or background traffic: every request a test sees is the page's. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
}
