// Preloaded (`node --import`) into a product a test starts: on SIGUSR2 it makes a fault outside any request, the one
// SCOPEBASE_TEST_FAULT names: `rejection` (a promise nobody handles; SCOPEBASE_TEST_FAULT_COUNT of them, 1 unless
// set) or `exception` (a throw from a timer).
process.on('SIGUSR2', () => {
  if (process.env.SCOPEBASE_TEST_FAULT === 'exception') {
    setImmediate(() => {
      throw new Error('an uncaught exception the test made');
    });
  } else {
    const count = Number(process.env.SCOPEBASE_TEST_FAULT_COUNT ?? 1);
    for (let i = 0; i < count; i++) void Promise.reject(new Error(i === 0 ? 'a stray rejection the test made' : `stray rejection ${i + 1} the test made`));
  }
});
