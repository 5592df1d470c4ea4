-- The friendly and Radix62 parsers take exactly CosId's forms (22023 for anything else), quote
-- at most 64 characters of what they refuse, and work in databases that are not UTF-8.
\set VERBOSITY default
\set SHOW_CONTEXT never
\set regress_database :DBNAME
CREATE EXTENSION cosid;

-- The friendly form: plain or padded to the widths of its parts, nothing else.
SELECT cosid_from_friendly('20220320053617924-5-0');
SELECT cosid_from_friendly('20220320053617924-0005-0000');
SELECT cosid_from_friendly('20220320053617924--5-0');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly('---5---0');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly(' 20220320053617924-5-0');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly('20220320053617924-5-0 ');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly('20220320053617924 - 5 - 0');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly(chr(160) || '20220320053617924-5-0');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly('20220320053617924-5-0' || chr(160));
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly('20220320053617924-+5-0');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly('20220320053617924-05-0');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly('20220320053617924-5-00000');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly(chr(160) || '20220320053617924-5-0' || chr(160));
\echo :LAST_ERROR_SQLSTATE

-- Radix62: padded or not, with no blank or sign.
SELECT cosid_from_radix62('0LrHucXALbs');
SELECT cosid_from_radix62('LrHucXALbs');
SELECT cosid_from_radix62('0LrHucXALbs ');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_radix62(' 0LrHucXALbs');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_radix62(chr(160) || 'LrHucXALbs');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_radix62('+LrHucXALbs');
\echo :LAST_ERROR_SQLSTATE

-- A long input is cut in the message.
SELECT cosid_from_friendly(repeat('é', 10000));
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_radix62(repeat('é', 10000));
\echo :LAST_ERROR_SQLSTATE

DROP EXTENSION cosid;

-- In LATIN1 and SQL_ASCII databases: E'\xe9' is "é" in LATIN1, and a byte that is not UTF-8 in
-- SQL_ASCII.
CREATE DATABASE cosid_latin1 TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C';
CREATE DATABASE cosid_ascii TEMPLATE template0 ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C';
\c cosid_latin1
CREATE EXTENSION cosid;
SELECT cosid_from_radix62(E'\xe9');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_radix62(E'0LrHucXALb\xe9');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly(E'2022\xe90320053617924-5-0');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly(E'20220320053617924-5-\xe9');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly(E'\xe9');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_radix62('0LrHucXALbs'), cosid_from_radix62('LrHucXALbs'),
       cosid_from_friendly('20220320053617924-0005-0000'),
       cosid_to_radix62(295913926632165376), cosid_friendly(295913926632165376);
SELECT cosid_from_friendly(chr(160) || '20220320053617924-5-0' || chr(160));
\echo :LAST_ERROR_SQLSTATE
\c cosid_ascii
CREATE EXTENSION cosid;
SELECT cosid_from_radix62(E'\xe9');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_radix62(E'0LrHucXALb\xe9');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly(E'2022\xe90320053617924-5-0');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly(E'20220320053617924-5-\xe9');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_friendly(E'\xe9');
\echo :LAST_ERROR_SQLSTATE
SELECT cosid_from_radix62('0LrHucXALbs'), cosid_from_radix62('LrHucXALbs'),
       cosid_from_friendly('20220320053617924-0005-0000'),
       cosid_to_radix62(295913926632165376), cosid_friendly(295913926632165376);
\c :regress_database
DROP DATABASE cosid_latin1;
DROP DATABASE cosid_ascii;
