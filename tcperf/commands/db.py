"""`tcperf db upgrade [--db PATH_OR_URL]`: bring a store to this tcperf's schema (Alembic migrations);
`tcperf db status`: where the store is and its schema.

A SQLite file is upgraded whenever this tcperf opens it; a shared PostgreSQL store only by `tcperf db upgrade`,
since hosts still on an older tcperf can no longer write to it afterwards.

    tcperf db upgrade --db postgresql+psycopg://ann@db.lab/tcperf
    postgresql+psycopg://ann@db.lab/tcperf: schema 1 -> 2
"""
from __future__ import annotations

from ..store import SCHEMA_VERSION, Store
from .common import add_db, console, print_json


def add_parser(sub) -> None:
    p = sub.add_parser("db")
    steps = p.add_subparsers(dest="step", metavar="STEP", parser_class=type(p), required=True)
    for name, fn, text in (("upgrade", upgrade, "apply the schema migrations a store needs"),
                           ("status", status, "print the store's place, back end and schema")):
        q = steps.add_parser(name, help=text)
        add_db(q)
        q.add_argument("--json", action="store_true", help="print JSON for machines")
        q.set_defaults(func=fn)


def upgrade(args) -> int:
    store = Store.open(args.db, upgrade=True)
    before, after = (int(r) if r else None for r in store.upgraded)
    if args.json:
        print_json({"store": store.where, "before": before, "after": after})
    elif before == after:
        console.print(f"{store.where}: schema {after}, already the latest")
    else:
        console.print(f"{store.where}: schema {before or 'none (new store)'} -> {after}")
    return 0


def status(args) -> int:
    store = Store.open(args.db)
    info = {"store": store.where, "backend": store.dialect, "schema": SCHEMA_VERSION, "runs": len(store.run_ids())}
    if args.json:
        print_json(info)
    else:
        console.print(f"{info['store']} ({info['backend']}): schema {info['schema']}, {info['runs']} run(s)")
    return 0
