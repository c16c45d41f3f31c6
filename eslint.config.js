import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['node_modules/', 'data/', 'test-artifacts/', 'bench/results/', 'dist/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  // The D1 peer's Worker runs in workerd, where the Fetch API types are globals.
  { files: ['bench/servers/d1/*.js'], languageOptions: { globals: { Response: 'readonly', Request: 'readonly' } } },
  {
    languageOptions: { globals: { process: 'readonly', console: 'readonly', Buffer: 'readonly', setTimeout: 'readonly', clearTimeout: 'readonly', setInterval: 'readonly', clearInterval: 'readonly', setImmediate: 'readonly', URL: 'readonly', fetch: 'readonly', performance: 'readonly' } },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
    },
  },
);
