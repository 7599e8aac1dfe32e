"""SQLiteStore: decisions in one SQLite file, shared safely by every process on a host.

The file is in WAL mode, so readers never wait for writers. Every write is one
autocommit statement, which takes the write lock when it starts, as
``BEGIN IMMEDIATE`` would (schema creation, the one multi-statement
transaction, uses ``BEGIN IMMEDIATE``); a write waits up to ``busy_timeout``
for another process's. Reads go through a connection (and a thread) of their
own, so a waiting write holds up no read. The threads are daemons, closed at
interpreter exit, so a store nobody closed never keeps a process alive. A file
deleted or replaced under the store is noticed and its path opened again.

The standard library's ``sqlite3`` on those threads, and anyio, are all it
needs: each statement's answer goes back to the event loop that sent it, so
the store works under asyncio and trio alike, and serves several threads'
event loops at once.

Gets are gathered: a get goes to the read thread at once when no read of
this store is in flight, and the gets made while one is are gathered, all those
of one event-loop iteration, into one ``WHERE key IN (...)`` query. A lone hit
so costs one thread hop and 64 concurrent hits cost two, not 64. Adds made in
one iteration go as one multi-row upsert.

Layout (schema version 1, kept in ``PRAGMA user_version``; created and
checked by ``asyncache.stores.sqlite.schema``)::

    asyncache_entries (key BLOB PRIMARY KEY, value BLOB, expires_at REAL NULL)
    asyncache_leases  (key BLOB PRIMARY KEY, token BLOB, expires_at REAL)

The package's modules: ``store`` (the store), ``connection`` (its two
connections, and noticing a replaced file), ``threads`` (a daemon thread per
connection, answering any loop; closed at exit), ``gathering`` (one
iteration's gets or adds as one statement), ``sql``
(the statements), ``schema`` (the file, its schema and pragmas, opening it),
``upkeep`` (pruning and the bounds), ``leases`` and ``describe`` (what a file
holds), ``url`` (``sqlite:///`` URLs).
"""

from __future__ import annotations

from .schema import SCHEMA_VERSION
from .store import SQLiteStore

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]
