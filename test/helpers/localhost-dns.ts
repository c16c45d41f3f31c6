// Preloaded (`node --import`) into third-party tools the tests run, such as drizzle-kit: the package's own
// `scopebase/localhost` (src/client/localhost.ts), so the tests use what docs/clients.md tells users to use.
import '../../src/client/localhost.ts';
