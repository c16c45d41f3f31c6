// One `sql` is one statement: a second one is refused, never silently dropped (node:sqlite ignores a tail).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { hasSecondStatement, isSpace } from '../src/db/statement-end.ts';

test('single statements, with trailing semicolons, spaces and comments', () => {
  for (const sql of ['SELECT 1', 'SELECT 1;', 'SELECT 1 ;  ', 'SELECT 1; -- done', 'SELECT 1; /* c */ ;;', "SELECT 'a;b'", 'SELECT "x;y" FROM t', 'SELECT [a;b]', "SELECT 'it''s; fine'",
    'CREATE TRIGGER tr AFTER INSERT ON t BEGIN INSERT INTO u VALUES (1); UPDATE u SET x = 2; END;', 'CREATE TEMP TRIGGER tr AFTER INSERT ON t BEGIN SELECT 1; END', 'SELECT 1 -- ; SELECT 2']) {
    assert.equal(hasSecondStatement(sql), false, sql);
  }
});

test('two statements are detected', () => {
  for (const sql of ['SELECT 1; SELECT 2', 'INSERT INTO t VALUES (1);INSERT INTO t VALUES (2)', "SELECT ';'; DROP TABLE t", 'SELECT 1; /* c */ DELETE FROM t',
    'CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT 1; END; DROP TABLE t']) {
    assert.equal(hasSecondStatement(sql), true, sql);
  }
});

test('isSpace is JavaScript\'s \\s on every UTF-16 code unit (compared by code: a regular expression per character was 3–5 times slower)', () => {
  for (let c = 0; c < 0x10000; c++) assert.equal(isSpace(c), /\s/.test(String.fromCharCode(c)), `U+${c.toString(16).padStart(4, '0')}`);
});
