// Preloaded (`node --import`) into a product a test starts: on SIGUSR2 it makes a fault outside any request, the one
// SCOPEBASE_TEST_FAULT names: `rejection` (a promise nobody handles) or `exception` (a throw from a timer).
process.on('SIGUSR2', () => {
  if (process.env.SCOPEBASE_TEST_FAULT === 'exception') {
    setImmediate(() => {
      throw new Error('an uncaught exception the test made');
    });
  } else {
    void Promise.reject(new Error('a stray rejection the test made'));
  }
});
