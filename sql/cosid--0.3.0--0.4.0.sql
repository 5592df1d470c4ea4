-- cosid 0.3.0 to 0.4.0: ALTER EXTENSION cosid UPDATE. Run it after the server was restarted
-- with the library of 0.4.0 (see docs/upgrading.md): the library of 0.3.0 has none of the
-- functions below, so run earlier it fails and changes nothing.
\echo Use "ALTER EXTENSION cosid UPDATE" to load this file. \quit
